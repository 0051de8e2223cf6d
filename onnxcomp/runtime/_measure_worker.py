"""Child process for onnxcomp.runtime.measure: one fresh process per configuration.

Usage: python -m onnxcomp.runtime._measure_worker CONFIG_JSON OUT_JSON
Writes {"result": {...}} or {"error": "..."} to OUT_JSON (stdout is left to ORT's chatter).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from collections.abc import Callable
from typing import Any

from onnxcomp.runtime.proc_memory import measure_call, status_bytes, trim_heap


def run_measurement(cfg: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime as ort

    from onnxcomp.runtime.data import digits_dataset, graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session

    ort.set_default_logger_severity(3)
    settings = RuntimeSettings.from_dict(cfg["settings"])
    artifact_dir = Path(cfg["artifact_dir"])
    model_path = Path(cfg["model"])
    steps, warmup = int(cfg["steps"]), int(cfg["warmup"])

    rss_start = status_bytes("VmRSS")
    # Fixed bounds, no controller: the figures are those of the bounds given (a training run's, or the graph's).
    session = open_artifact_session(artifact_dir, model_path, settings=settings, seed=int(cfg["seed"]),
                                    bounds=cfg.get("error_bounds", {}))
    spec = graph_data(artifact_dir, model_path, list(session.module.input_names()))
    if cfg.get("data", "synthetic") == "digits":
        gen = digits_dataset(spec.image.shape, spec.classes).train_batches(int(cfg["seed"]))
    elif cfg.get("data") == "text":
        from onnxcomp.runtime.text_data import text_dataset

        gen = text_dataset(spec.image.shape, spec.classes).train_batches(int(cfg["seed"]))
    else:
        gen = synthetic_batches(spec.image.shape, spec.classes, int(cfg["seed"]), spec.image.dtype)
    # Generate every batch up front so data creation never lands inside a measured step.
    batches = [next(gen) for _ in range(warmup + steps)]
    del gen
    # The graph's codec kernels are loaded at set-up, as `onnxcomp train` does, so the growth figures are the
    # training step's; the cost is reported on its own (AOT-compiled by default: a few MiB; numba's JIT runtime,
    # ONNXCOMP_CODEC_BACKEND=numba: ~120 MiB once per process). The figure also holds this graph's onnx.load.
    rss_before_codecs = status_bytes("VmRSS")
    _load_codec_kernels(model_path)
    codec_kernel_bytes = status_bytes("VmRSS") - rss_before_codecs
    # Every baseline is read with the heap trimmed (measure_call): RSS then holds only pages with live data.
    trim = bool(cfg.get("trim_heap", True))
    rss_untrimmed = status_bytes("VmRSS")
    heap_trimmed = trim and trim_heap()
    rss_setup = status_bytes("VmRSS")

    process_peak = status_bytes("VmHWM")  # imports and set-up, before the first per-step reset
    losses: list[float] = []
    peaks: list[int] = []
    growths: list[int] = []
    times: list[float] = []
    warmup_peaks: list[int] = []
    trimmed: list[int] = []
    bounds: list[int] = []
    for i, (x, y) in enumerate(batches):
        def step(x: Any = x, y: Any = y) -> tuple[Any, float]:
            t0 = time.perf_counter()
            loss = session.step(x, y)  # an onnxcomp op that failed inside ORT raises OpError here
            return loss, time.perf_counter() - t0

        m = measure_call(step, trim=trim)
        loss, elapsed = m.result
        process_peak = max(process_peak, m.hwm)
        trimmed.append(m.trimmed)
        if i < warmup:
            warmup_peaks.append(m.peak)
            continue
        losses.append(float(loss))
        peaks.append(m.peak)
        # This process's growth over its (trimmed) set-up RSS. A process that never trims holds at most the free
        # heap pages the trim handed back on top of that (the same allocations land at the same addresses; only
        # pages not touched again differ): HWM + trimmed bounds it, loosely (pages the step touches again count
        # twice; mobilenet_v1_s's plan: 23.1 bound, 13.9 this process, 3.9 the untrimmed baseline's figure).
        growths.append(m.hwm - rss_setup)
        bounds.append(m.hwm + m.trimmed - rss_setup)
        times.append(elapsed)

    return {
        "peak_bytes": max(peaks),
        "growth_bytes": max(growths),
        "rss_setup_bytes": rss_setup,
        "rss_start_bytes": rss_start,
        "step_time_s": statistics.median(times),
        "step_times_s": times,
        "losses": losses,
        "peak_bytes_per_step": peaks,
        "growth_bytes_per_step": growths,
        "warmup_peak_bytes": warmup_peaks,
        # The whole process's high-water mark (imports, session set-up, warm-up and measured steps).
        "process_peak_bytes": process_peak,
        "torch_imported": "torch" in sys.modules,
        "codec_kernel_bytes": codec_kernel_bytes,
        "batch": spec.batch,
        "classes": spec.classes,
        "classes_inferred": spec.classes_inferred,
        "ort_version": ort.__version__,
        "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
        # Free heap pages handed back before set-up's RSS and before each step (warm-up first): what the old,
        # untrimmed baselines counted on top of live data. heap_trimmed False: no trim (asked off, or no glibc).
        "heap_trimmed": heap_trimmed,
        "heap_trimmed_setup_bytes": max(0, rss_untrimmed - rss_setup),
        "heap_trimmed_bytes_per_step": trimmed,
        # growth_bytes_per_step plus the bytes trimmed before each step: bounds an untrimmed process's growth.
        "growth_bytes_untrimmed_bound_per_step": bounds,
    }


def _load_codec_kernels(model_path: Path) -> None:
    """Load (or compile) the CPU kernels of the codecs whose ops ``model_path`` holds; nothing for a graph
    without codec ops."""
    from onnxcomp.custom_ops import cpu

    codecs = _codecs_of(model_path)
    # The parsed graph is gone before the kernels load: glibc then hands its freed heap to the kernels' long-lived
    # allocations instead of leaving it as holes under them, which a training step's small blocks would touch
    # again (docs/notes/lossygrowth.md).
    if codecs:
        cpu.warm_up(codecs)


def _codecs_of(model_path: Path) -> list[str]:
    """The codecs whose ops the graph at ``model_path`` holds (the parsed graph is freed on return)."""
    import onnx

    from onnxcomp.custom_ops import contract

    graph = onnx.load(str(model_path), load_external_data=False).graph
    return sorted({op.codec for n in graph.node if (op := contract.codec_op(n.domain, n.op_type)) is not None})


def run_child(work: Callable[[dict[str, Any]], Any], cfg_path: str, out_path: str) -> int:
    """A child process's whole job: ``work(config)`` and its result, or its error, written as JSON for the
    parent (which raises OnnxcompError on an error); the exit code says which."""
    try:
        payload: dict[str, Any] = {"result": work(json.loads(Path(cfg_path).read_text()))}
        code = 0
    except Exception as exc:  # reported to the parent, which raises OnnxcompError
        payload = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        code = 3
    Path(out_path).write_text(json.dumps(payload))
    return code


def main(argv: list[str]) -> int:
    cfg_path, out_path = argv
    return run_child(run_measurement, cfg_path, out_path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
