"""tools/accuracy_transformers.py's noise-floor control: the exact graph from one-ulp-perturbed parameters."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

_TOOL = Path(__file__).parents[1] / "tools" / "accuracy_transformers.py"


def _tool():
    spec = importlib.util.spec_from_file_location("_tool_accuracy_transformers", _TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parameters(checkpoint: Path) -> dict[str, tuple[np.ndarray, bool]]:
    from onnxruntime.training.api import CheckpointState

    state = CheckpointState.load_checkpoint(str(checkpoint))
    return {name: (np.array(p.data), p.requires_grad) for name, p in state.parameters}


def test_perturbed_artifacts_move_every_trainable_parameter_by_one_ulp(small_artifacts, tmp_path):
    from onnxcomp.runtime.train import train

    tool = _tool()
    out = tool._perturbed_artifacts(small_artifacts, tmp_path)
    before, after = _parameters(small_artifacts / "checkpoint"), _parameters(out / "checkpoint")
    assert before.keys() == after.keys()
    up = down = 0
    for name, (old, trainable) in before.items():
        new, still_trainable = after[name]
        assert still_trainable == trainable and new.dtype == old.dtype and new.shape == old.shape
        if not trainable:
            assert np.array_equal(new, old), name
            continue
        # one ulp exactly: the new value is the float32 neighbour of the old one on one side
        towards = np.where(new > old, np.float32(np.inf), np.float32(-np.inf))
        assert np.array_equal(np.nextafter(old, towards), new), name
        up, down = up + int((new > old).sum()), down + int((new < old).sum())
    assert up > 0 and down > 0        # random directions, not a uniform scaling
    # The eval model and graphs are carried; the exact graph then trains from the nudged start: the same
    # losses to ~1e-5 over a few steps (the perturbation is rounding-level) but not bit-identical (it is a
    # perturbation at all; a single forward can round back to the same loss, hence several steps).
    assert (out / "training_model.onnx").exists() and (out / "eval_model.onnx").exists()
    runs = [train(d, steps=4, data="synthetic", seed=0, progress=False).losses for d in (small_artifacts, out)]
    assert runs[0] != runs[1]
    assert max(abs(a - b) / abs(a) for a, b in zip(*runs)) <= 1e-5
    # made once: a second call reuses the copy
    stamp = (out / "checkpoint").stat().st_mtime_ns
    assert tool._perturbed_artifacts(small_artifacts, tmp_path) == out
    assert (out / "checkpoint").stat().st_mtime_ns == stamp
