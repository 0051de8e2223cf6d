"""tools/memory_timeline.py: per-node measured RSS lines up with ORT's run and with `measure`."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import onnx

from onnxcomp.runtime.measure import measure


def _tool():  # noqa: ANN202
    path = Path(__file__).parents[1] / "tools" / "memory_timeline.py"
    spec = importlib.util.spec_from_file_location("memory_timeline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_timeline_covers_the_step_and_matches_measure(tmp_path: Path) -> None:
    from conftest import build_small_artifacts

    # Batch 32 at 64x64: a step of tens of ms, so the 0.2 ms sampler sees it many times.
    art = build_small_artifacts(tmp_path / "art", batch=32, image=64)
    t = _tool().timeline(art, art / "training_model.onnx", data="synthetic")
    model = onnx.load(str(art / "training_model.onnx"))
    names = [r["node"].removeprefix("fused ") for r in t["nodes"]]
    # Every kernel of one training step, once (ORT may fuse a few nodes away).
    assert len(names) == len(set(names)) and set(names) <= {n.name for n in model.graph.node}
    assert len(names) >= 0.8 * len(model.graph.node)
    assert all(r["planned"] is not None for r in t["nodes"] if not r["node"].startswith("fused "))
    # The sampled peak is the step's peak as `measure` reports it, up to sampling and allocator noise.
    m = measure(art, steps=2, data="synthetic")
    assert 0.5 * m.peak_bytes <= t["peak"] <= 1.5 * m.peak_bytes + (1 << 20), (t["peak"], m.peak_bytes)
    assert max(r["measured"] for r in t["nodes"]) <= t["peak"]
