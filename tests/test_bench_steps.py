"""tools/bench_steps.py: configuration syntax and the per-configuration THP switch (``%nothp``)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest


def _tool():  # noqa: ANN202
    path = Path(__file__).parents[1] / "tools" / "bench_steps.py"
    spec = importlib.util.spec_from_file_location("bench_steps", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_config_flags_parse() -> None:
    tool = _tool()
    label, file, _, store, nothp = tool._config("comet+inline%nothp=comet.onnx")
    assert (label, file, store, nothp) == ("comet+inline%nothp", "comet.onnx", "inline", True)
    assert tool._config("base=training_model.onnx")[4] is False
    with pytest.raises(SystemExit, match="unknown flag"):
        tool._config("base%thp=training_model.onnx")


# Measured in a fresh interpreter: in the pytest process, earlier tests leave glibc's heap with resident free pages
# that a 32 MiB array can be carved from (0 faults, seen in 1 of 3 full runs), which says nothing about THP.
_MEASURE = """
import importlib.util, json, resource, sys
import numpy as np
spec = importlib.util.spec_from_file_location("bench_steps", sys.argv[1])
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)

def faults_touching(nbytes):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(nbytes, dtype=np.uint8)     # NumPy advises THP on arrays >= 4 MiB (madvise mode suffices)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    del a
    return after - before

size = int(sys.argv[2])
try:
    tool.set_thp_disabled(True)
    off = min(faults_touching(size) for _ in range(3))
    tool.set_thp_disabled(False)
    on = min(faults_touching(size) for _ in range(3))
finally:
    tool.set_thp_disabled(False)
print(json.dumps([off, on]))
"""


def test_nothp_switch_changes_how_fresh_memory_faults() -> None:
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[never]" in mode.read_text():
        pytest.skip("transparent huge pages are off on this machine")
    size = 32 << 20
    tool = Path(__file__).parents[1] / "tools" / "bench_steps.py"
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(tool), str(size)], capture_output=True, text=True,
                          check=True)
    off, on = json.loads(done.stdout.strip().splitlines()[-1])
    # THP off: one fault per 4 KiB page; on: most of the array in 2 MiB pages (one fault each).
    assert off >= size // 4096
    assert on < off // 2
