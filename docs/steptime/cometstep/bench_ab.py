"""tools/bench_steps.py with two more CPU "backends": ``old``, the sz kernels of a given commit (default main's
df9b1a6, read with ``git show``), so baseline / old comet / new comet interleave step by step in one process;
``t1``: the current kernels with numba limited to one thread (``numba.set_num_threads(1)``) for that
configuration's steps.

    python docs/steptime/cometstep/bench_ab.py [--old-commit C] DIR baseline=training_model.onnx \
        comet@old=comet.onnx comet=comet.onnx --steps 15 --warmup 2 --threads 1 --json out.json
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))


def _old_sz(commit: str) -> SimpleNamespace:
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:custom_ops/cpu/sz.py"], check=True,
                         capture_output=True, text=True).stdout
    src = src.replace("from .._zfp_numba import", "from onnxcomp.custom_ops._zfp_numba import")
    path = Path(tempfile.mkdtemp(prefix="old_sz_")) / "old_sz.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_sz", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from onnxcomp.custom_ops import cpu

    cpu.threading_layer()
    return SimpleNamespace(**{k: cpu._locked(getattr(mod, k)) for k in mod.__all__})


def main() -> int:
    argv = sys.argv[1:]
    commit = "df9b1a6"
    if argv[:1] == ["--old-commit"]:
        commit, argv = argv[1], argv[2:]
    from onnxcomp.custom_ops import cpu

    old = _old_sz(commit)
    state = {"old": False}
    real_set, real_kernels = cpu.set_backend, cpu.kernels
    cpu.CHOICES = (*cpu.CHOICES, "old", "t1")
    import numba

    def set_backend(name: str) -> None:
        state["old"] = name == "old"
        numba.set_num_threads(1 if name == "t1" else numba.config.NUMBA_NUM_THREADS)
        real_set("auto" if name in ("old", "t1") else name)

    def kernels(name: str) -> SimpleNamespace | None:
        return old if state["old"] and name == "sz" else real_kernels(name)

    cpu.set_backend, cpu.kernels = set_backend, kernels
    cpu.warm_up()
    import numpy as np

    old.encode_blocks(np.ones(100, np.float32), 1e-3)  # compile / load the old kernels before any step
    import bench_steps

    return bench_steps.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
