"""The fault-injection harness (tools/fault_injection.py) on the small test model: SIGKILL at random points
of a ``transform --split-weights --force`` into an existing directory leaves the complete old or the complete
new set, and the next run leaves no temp files (issue 17, item 3). Slow: each trial is two CLI runs."""
from __future__ import annotations

import importlib.util
import random
import signal
import sys
from pathlib import Path

import pytest

_TOOL = Path(__file__).resolve().parents[1] / "tools" / "fault_injection.py"


def _harness():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("fault_injection", _TOOL)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["fault_injection"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_sigkill_during_split_weights_force_leaves_old_or_new_set(small_artifacts: Path, tmp_path: Path) -> None:
    fi = _harness()
    out = tmp_path / "out"
    base = fi.ONNXCOMP + ["transform", str(small_artifacts), "-o", str(out), "--policy", "comet", "--min-bytes", "1000"]
    row = fi.kill_trials("split", out, base, base + ["--split-weights", "2KiB", "--force"], 4, random.Random(1),
                         signal.SIGKILL)
    assert set(row["states"]) <= {"complete old set", "complete new set"}, row
    assert row["rerun_not_clean"] == 0, row


@pytest.mark.slow
def test_concurrent_writers_in_separate_processes(small_artifacts: Path, tmp_path: Path) -> None:
    fi = _harness()
    res = fi.campaign_concurrent(tmp_path, small_artifacts, 2)
    assert res["winners_per_round"] == {"1": 2} and res["losers_told_in_one_line"] == 2


def test_corrupt_changes_exactly_one_thing() -> None:
    import numpy as np

    fi = _harness()
    payload = [np.arange(10, dtype=np.int64), np.zeros(3, np.uint8)]
    bad, how = fi.corrupt(payload, np.random.default_rng(0), "flip")
    diff = sum(int(np.unpackbits((a.view(np.uint8) ^ b.view(np.uint8))).sum()) for a, b in zip(payload, bad))
    assert diff == 1 and "flip" in how
    bad, how = fi.corrupt(payload, np.random.default_rng(0), "truncate")
    assert sum(a.size for a in bad) < sum(a.size for a in payload) and "truncate" in how
