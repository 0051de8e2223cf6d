"""measure's text says which memory figure counts under the settings used."""
from __future__ import annotations

from pathlib import Path

from onnxcomp.runtime.figures import describe_peaks
from onnxcomp.runtime.measure import measure
from onnxcomp.runtime.session import RuntimeSettings


def test_arena_on_points_at_growth_and_reports_process_peak(small_artifacts: Path) -> None:
    on = measure(small_artifacts, steps=2, settings=RuntimeSettings(arena=True, mem_pattern=True)).to_dict()
    text = "\n".join(describe_peaks(on))
    assert "arena is on" in text and "growth over set-up is the figure" in text
    assert on["extras"]["process_peak_bytes"] >= on["rss_setup_bytes"] + on["growth_bytes"] - 4096
    assert on["extras"]["torch_imported"] is False
    off = {**on, "settings": RuntimeSettings().to_dict()}
    assert "arena is off" in "\n".join(describe_peaks(off))


def test_trimmed_heap_is_reported_per_step() -> None:
    base = {"growth_bytes": 0, "settings": RuntimeSettings().to_dict(),
            "extras": {"peak_bytes_per_step": [1 << 20], "warmup_peak_bytes": [2 << 20]}}
    assert not any("free heap" in line for line in describe_peaks(base))
    trimmed = {**base, "extras": {**base["extras"], "heap_trimmed": True,
                                  "heap_trimmed_bytes_per_step": [0, 5 << 20]}}
    assert any("free heap handed back before each step" in line and "0.0 5.0 MiB" in line
               for line in describe_peaks(trimmed))
