"""The training runtime (ORT training API + onnxcomp's ops) runs without importing torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onnxcomp.transform import transform

# Train a transformed graph, then take a measurement step the way measure's worker does, in one process.
_CHILD = """
import json, sys
from onnxcomp.runtime.train import train
from onnxcomp.runtime._measure_worker import run_measurement
from onnxcomp.runtime.session import RuntimeSettings
r = train(sys.argv[1], model=sys.argv[2], steps=2, data="digits", progress=False)
m = run_measurement({"artifact_dir": sys.argv[1], "model": sys.argv[2], "steps": 1, "warmup": 0, "seed": 0,
                     "settings": RuntimeSettings().to_dict(), "data": "digits"})
print(json.dumps({"torch": "torch" in sys.modules, "losses": r.losses, "accuracy": r.accuracy,
                  "measured": m["losses"]}))
"""


def _run_child(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_training_a_transformed_graph_does_not_import_torch(small_artifacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "lossless.onnx"
    result = transform(small_artifacts, out, "lossless")
    assert result.records, "the lossless policy should encode something in the small CNN"
    lean = _run_child(_CHILD, str(small_artifacts), str(out))
    assert lean["torch"] is False
    assert lean["accuracy"] is not None and len(lean["losses"]) == 2 and len(lean["measured"]) == 1


@pytest.mark.slow
def test_full_import_gives_the_same_losses(small_artifacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "lossless.onnx"
    transform(small_artifacts, out, "lossless")
    lean = _run_child(_CHILD, str(small_artifacts), str(out))
    # Same run with the hook switched off: onnxruntime pulls torch in, and the figures do not change.
    full = _run_child(_CHILD, str(small_artifacts), str(out), env={"ONNXCOMP_FULL_ORT_IMPORT": "1"})
    assert full["torch"] is True
    assert full["losses"] == lean["losses"]


@pytest.mark.slow
def test_lean_import_keeps_the_rest_of_onnxruntime_training_reachable() -> None:
    code = """
import json, sys
import onnxcomp.runtime.session
from onnxruntime.training import api
before = "torch" in sys.modules
import onnxruntime.training as t
names = [t.TrainingParameters.__name__, t.artifacts.__name__, t.is_ortmodule_available.__name__]
print(json.dumps({"before": before, "after": "torch" in sys.modules, "names": names}))
"""
    r = _run_child(code)
    assert r["before"] is False and r["after"] is True  # artifacts (an export-side tool) may import torch
    assert r["names"] == ["TrainingParameters", "onnxruntime.training.artifacts", "is_ortmodule_available"]

