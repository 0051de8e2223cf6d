"""tools/bench_suite.py's tables: step peak, growth and the process's peak, ratios against the baseline."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import bench_suite  # noqa: E402

MIB = 1 << 20


def _row(model: str, policy: str, settings: str, peak: float, growth: float, process: float | None) -> dict:
    return {"model": model, "batch": 16, "image": 56, "policy": policy, "settings": settings,
            "peak_bytes": int(peak * MIB), "growth_bytes": int(growth * MIB),
            **({"process_peak_bytes": int(process * MIB)} if process is not None else {})}


def test_tables_report_the_process_peak_beside_step_peak_and_growth() -> None:
    rows = [_row("net", "baseline", "ort-default", 0.0, 100.0, 200.0),
            _row("net", "comet", "ort-default", 0.0, 25.0, 250.0),      # 4x less growth, a bigger process
            _row("net", "baseline", "onnxcomp", 60.0, 61.0, 150.0),
            _row("net", "comet", "onnxcomp", 15.0, 16.0, 260.0)]
    text = bench_suite.tables(rows, ["comet"])
    assert "### process peak, ort-default settings" in text
    process = text.split("### process peak, ort-default settings")[1].split("###")[0]
    assert "| net | 16 | 56 | 200.0 | 250.0 (0.80×) |" in process
    growth = text.split("### growth over set-up, ort-default settings")[1].split("###")[0]
    assert "25.0 (4.00×)" in growth
    step = text.split("### step peak, ort-default settings")[1].split("###")[0]
    assert "| net |" not in step                     # ~0 step peaks under the arena: no ratio, no row


def test_rows_cached_before_the_process_peak_was_recorded_still_tabulate() -> None:
    rows = [_row("net", "baseline", "onnxcomp", 60.0, 61.0, None), _row("net", "comet", "onnxcomp", 15.0, 16.0, None)]
    text = bench_suite.tables(rows, ["comet"])
    assert "15.0 (4.00×)" in text
    assert "| net |" not in text.split("### process peak, onnxcomp settings")[1].split("###")[0]
