"""Training-step memory and time, measured in a fresh child process per configuration.

A fresh process keeps allocator state from earlier runs out of the figures, and a native crash in
ORT (seen on some graphs) is reported instead of killing the caller.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime.session import RuntimeSettings

# Freed tensors above 128 KiB go back to the OS at once; without this glibc keeps them in the heap
# and RSS figures drift by tens of MiB between runs.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def child_env() -> dict[str, str]:
    """The measurement child's environment: this one, glibc pinned (``MALLOC_ENV``), and the protobuf
    implementation the user's environment had (``onnxcomp.USER_PROTOBUF_IMPLEMENTATION``), not the pure-Python one
    an imported onnxruntime_extensions sets in ``os.environ``: `transform --verify` measured a plan's set-up RSS
    2.2 MiB higher than `measure` did."""
    from onnxcomp import USER_PROTOBUF_IMPLEMENTATION

    env = {**os.environ, **MALLOC_ENV}
    env.pop("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", None)
    if USER_PROTOBUF_IMPLEMENTATION is not None:
        env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = USER_PROTOBUF_IMPLEMENTATION
    return env
_STDERR_TAIL = 2000


@dataclass
class MeasureResult:
    """peak_bytes: max over steps of VmHWM - pre-step RSS (reads ~0 with the arena on: the arena keeps
    the previous step's memory). growth_bytes: max over steps of VmHWM - post-setup RSS (RSS after
    the session, optimizer and data exist, before warm-up): the honest figure with the arena on. Both
    baselines are read with glibc's free heap pages trimmed (unless measure(trim_heap=False)): see
    proc_memory.measure_call: growth_bytes is this process's growth over its trimmed set-up RSS. It is higher
    than the untrimmed figure where set-up leaves free heap that the steps reuse (under ORT's defaults:
    mobilenet_v1_s's 4.6k-node plan 4.3 -> 11.0 MiB, ResNet-18's 15 MiB plan 28.83 -> 28.89 MiB;
    docs/notes/peakjump.md); the process's own high-water mark is unchanged. Extras
    growth_bytes_untrimmed_bound_per_step adds the bytes trimmed before each step, a loose upper bound for a
    process that never trims."""

    peak_bytes: int
    growth_bytes: int
    rss_setup_bytes: int
    step_time_s: float
    step_times_s: list[float]
    losses: list[float]
    settings: dict[str, Any]
    model: str
    steps: int
    warmup: int
    seed: int
    extras: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def measure(
    artifact_dir: str | os.PathLike,
    *,
    model: str | os.PathLike | None = None,
    steps: int = 5,
    settings: RuntimeSettings | None = None,
    warmup: int = 1,
    seed: int = 0,
    timeout_s: float | None = None,
    data: str = "synthetic",
    error_bounds: dict[str, float] | None = None,
    trim_heap: bool = True,
) -> MeasureResult:
    """Train `steps` steps (after `warmup`) on seeded `data` ("synthetic" or "digits") in a fresh process;
    report memory, time and losses. model: training graph file (default training_model.onnx of
    artifact_dir). error_bounds: run-time bounds (encoder key → eb) for error-bounded encoders, e.g. the
    ones a training run's controller settled on (`onnxcomp train --json` → "bounds"); payload sizes, and
    so the peak, depend on them and on the data. trim_heap: hand glibc's free heap pages back before set-up's
    RSS and each step's baseline is read (proc_memory.measure_call), so a step's peak counts the heap pages it
    reuses; False reads the old, untrimmed baseline (figures before Nov 2026's peakjump change)."""
    artifact_dir = Path(artifact_dir).resolve()
    settings = settings or RuntimeSettings()
    if data not in ("synthetic", "digits", "text"):
        raise OnnxcompError(f"unknown data source {data!r}; use 'synthetic', 'digits' or 'text' (token models)")
    if steps < 1 or warmup < 0:
        raise OnnxcompError(f"measure needs steps >= 1 and warmup >= 0 (got steps={steps}, warmup={warmup})")
    from onnxcomp.load import resolve_training_run

    model_path = resolve_training_run(artifact_dir, model)
    cfg = {"artifact_dir": str(artifact_dir), "model": str(model_path), "steps": steps, "warmup": warmup,
           "seed": seed, "settings": settings.to_dict(), "data": data, "error_bounds": error_bounds or {},
           "trim_heap": trim_heap}

    with tempfile.TemporaryDirectory(prefix="onnxcomp-measure-") as tmp:
        cfg_path, out_path = Path(tmp) / "config.json", Path(tmp) / "result.json"
        cfg_path.write_text(json.dumps(cfg))
        env = child_env()
        cmd = [sys.executable, "-m", "onnxcomp.runtime._measure_worker", str(cfg_path), str(out_path)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise OnnxcompError(
                f"measuring {model_path} took longer than {timeout_s} s; use fewer steps or a larger timeout"
            ) from exc
        payload = json.loads(out_path.read_text()) if out_path.exists() else None

    tail = proc.stderr[-_STDERR_TAIL:].strip()
    if payload is None or (proc.returncode != 0 and "error" not in payload):
        raise OnnxcompError(
            f"measurement child for {model_path} died ({_describe_exit(proc.returncode)}); "
            f"the graph likely crashes ONNX Runtime natively. stderr tail: {tail or '(empty)'}"
        )
    if "error" in payload:
        raise OnnxcompError(
            f"measuring {model_path} failed: {payload['error']}; check that the graph runs with "
            "onnxruntime.training (settings: " + json.dumps(settings.to_dict()) + ")"
        )
    r = payload["result"]
    core = {"peak_bytes", "growth_bytes", "rss_setup_bytes", "step_time_s", "step_times_s", "losses"}
    return MeasureResult(
        peak_bytes=r["peak_bytes"], growth_bytes=r["growth_bytes"], rss_setup_bytes=r["rss_setup_bytes"],
        step_time_s=r["step_time_s"], step_times_s=r["step_times_s"], losses=r["losses"],
        settings=settings.to_dict(), model=str(model_path), steps=steps, warmup=warmup, seed=seed,
        extras={k: v for k, v in r.items() if k not in core}
        | {"data": data, "error_bounds": error_bounds or {}, "trim_heap": trim_heap},
    )
