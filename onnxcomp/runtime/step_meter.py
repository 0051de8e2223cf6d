"""Per-step and whole-process memory of a training loop, read as `onnxcomp measure` reads it.

For loops `measure` does not run itself (the PyTorch side-by-side rows, ORTModule: tools/bench_side_by_side.py,
tools/bench_ortmodule.py), so their figures compare with measure's: every baseline after ``malloc_trim(0)``
(proc_memory.measure_call; docs/notes/peakjump.md), under the same MALLOC_MMAP_THRESHOLD_ (the caller's
environment: runtime.measure.MALLOC_ENV)."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from onnxcomp.runtime.proc_memory import measure_call, status_bytes, trim_heap


class StepMeter:
    """Per-step and whole-process memory as `onnxcomp measure` reads it: ``setup_done`` trims the heap and takes
    the set-up RSS; ``step`` runs one step through ``measure_call`` (trim, RSS, VmHWM reset, call, VmHWM). VmHWM is
    reset before each step, so the process peak is the max of the high-water marks read before each reset and
    after every step. ``trim=False``: the old, untrimmed baselines."""

    def __init__(self, trim: bool = True) -> None:
        self.trim = trim
        self.process_peak = 0
        self.setup_rss = 0
        self.setup_trimmed = 0
        self.step_peaks: list[int] = []
        self.step_hwms: list[int] = []
        self.trimmed: list[int] = []
        self.times: list[float] = []

    def setup_done(self) -> None:
        self.process_peak = max(self.process_peak, status_bytes("VmHWM"))
        before = status_bytes("VmRSS")
        if self.trim:
            trim_heap()
        self.setup_rss = status_bytes("VmRSS")
        self.setup_trimmed = max(0, before - self.setup_rss)

    def step(self, fn: Callable[[], Any]) -> Any:
        def timed() -> Any:
            t0 = time.perf_counter()
            out = fn()
            self.times.append(time.perf_counter() - t0)
            return out

        self.process_peak = max(self.process_peak, status_bytes("VmHWM"))
        m = measure_call(timed, trim=self.trim)
        self.step_peaks.append(m.peak)
        self.step_hwms.append(m.hwm)
        self.trimmed.append(m.trimmed)
        self.process_peak = max(self.process_peak, m.hwm)
        return m.result

    def result(self, losses: list[float], warmup: int = 1) -> dict[str, Any]:
        """The row's figures; the first ``warmup`` steps (one-time allocations: ORT's arena, lazy init) are
        reported apart."""
        w = warmup
        return {"step_peak": max(self.step_peaks[w:]), "step_peaks": self.step_peaks[w:],
                "warmup_step_peaks": self.step_peaks[:w], "process_peak": self.process_peak,
                "growth": max(self.step_hwms[w:]) - self.setup_rss, "setup_rss": self.setup_rss,
                "heap_trimmed": self.trim, "setup_trimmed": self.setup_trimmed, "trimmed_per_step": self.trimmed,
                "step_time": statistics.median(self.times[w:]), "step_times": self.times[w:],
                "losses": losses[w:], "first_loss": losses[0]}
