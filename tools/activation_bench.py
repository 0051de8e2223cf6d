"""What the codec benchmarks on dumped activations share (tools/bench_sz.py, tools/bench_zfp.py): timing, the
distinct float32 tensors of a tools/dump_activations.py directory, and writing bench.json + tables.md."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np


def best_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The best of ``repeat`` wall-clock runs of ``fn`` and its last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def distinct_activations(directory: Path, min_mib: float, *, say_skipped: bool = False
                         ) -> Iterator[tuple[Path, np.ndarray, dict[str, Any]]]:
    """(file, tensor, meta) for every float32 ``.npy`` of at least ``min_mib`` MiB in ``directory``, each
    distinct tensor once (a ReLU output is often the next layer's input too). meta: tensor, shape, mib,
    density (non-zero fraction)."""
    files = sorted(directory.glob("*.npy"))
    if not files:
        raise SystemExit(f"{directory}: no .npy files; run tools/dump_activations.py first")
    seen: dict[str, str] = {}
    for path in files:
        x = np.load(path)
        if x.dtype != np.float32 or x.nbytes < min_mib * 2**20:
            continue
        digest = hashlib.sha1(x.tobytes()).hexdigest()
        if digest in seen:
            if say_skipped:
                print(f"skip {path.name}: same tensor as {seen[digest]}")
            continue
        seen[digest] = path.name
        yield path, x, {"tensor": path.stem, "shape": list(x.shape), "mib": x.nbytes / 2**20,
                        "density": float(np.count_nonzero(x) / x.size)}


def write_results(out: Path, args: Any, results: dict[str, Any], tables_md: str, *, env: dict[str, Any],
                  package: str) -> None:
    """``out``/bench.json (environment, arguments, ``results``) and ``out``/tables.md. ``env``: the tool's own
    entries beside machine, CPUs, Python and NumPy; ``package``: the reference library whose version is
    recorded when it is installed."""
    out.mkdir(parents=True, exist_ok=True)
    env = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
           "numpy": np.__version__, **env}
    try:
        from importlib.metadata import version

        env[package] = version(package)
    except Exception:  # noqa: BLE001  (not installed)
        pass
    (out / "bench.json").write_text(json.dumps({"env": env, "args": {k: str(v) for k, v in vars(args).items()},
                                                **results}, indent=1))
    (out / "tables.md").write_text(tables_md)
