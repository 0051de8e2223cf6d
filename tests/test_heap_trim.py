"""The step-peak baseline: glibc's freed-but-resident heap must not be read as the step's own free memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onnxcomp.runtime import proc_memory
from onnxcomp.runtime.measure import measure
from onnxcomp.runtime.session import RuntimeSettings
from pinned_heap import PINNED_HEAP_STEP

MiB = 1 << 20

_STEP_SCRIPT = PINNED_HEAP_STEP + textwrap.dedent("""
    from onnxcomp.runtime.proc_memory import measure_call
    step()  # warm: the heap grows once
    untrimmed = measure_call(step, trim=False)
    trimmed = measure_call(step, trim=True)
    print(json.dumps({"untrimmed": untrimmed.peak, "trimmed": trimmed.peak, "handed_back": trimmed.trimmed}))
""")


def test_step_peak_counts_heap_pages_a_step_reuses() -> None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run([sys.executable, "-c", _STEP_SCRIPT], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    # The old baseline already held the 8 MiB the step reuses: its peak reads (almost) nothing.
    assert r["untrimmed"] < 2 * MiB, r
    # Trimmed first, the baseline holds no free heap pages and the step's 8 MiB are counted.
    assert r["handed_back"] >= 6 * MiB, r
    assert r["trimmed"] >= 6 * MiB, r


def test_without_malloc_trim_nothing_is_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc_memory, "_malloc_trim", lambda: None)
    assert proc_memory.trim_heap() is False
    m = proc_memory.measure_call(lambda: 7, trim=True)
    assert m.result == 7 and m.trimmed == 0 and m.peak == m.hwm - m.pre


def test_measure_reads_trimmed_baselines(small_artifacts: Path) -> None:
    trimmed = measure(small_artifacts, steps=2, settings=RuntimeSettings())
    e = trimmed.extras
    assert e["heap_trimmed"] is True and e["trim_heap"] is True
    assert len(e["heap_trimmed_bytes_per_step"]) == 3  # warm-up + 2 steps
    # The bound for a process that never trims: this process's growth plus what was trimmed before each step.
    assert e["growth_bytes_untrimmed_bound_per_step"] == [g + t for g, t in zip(e["growth_bytes_per_step"],
                                                                                e["heap_trimmed_bytes_per_step"][1:])]
    assert trimmed.growth_bytes == max(e["growth_bytes_per_step"])
    old = measure(small_artifacts, steps=2, settings=RuntimeSettings(), trim_heap=False)
    assert old.extras["heap_trimmed"] is False and not any(old.extras["heap_trimmed_bytes_per_step"])
    assert old.losses == trimmed.losses  # the trim changes memory figures, never the training


def test_measure_cli_keeps_the_untrimmed_baseline_on_request() -> None:
    from onnxcomp.cli import build_parser

    assert build_parser().parse_args(["measure", "d", "--no-trim-heap"]).no_trim_heap
    assert not build_parser().parse_args(["measure", "d"]).no_trim_heap
