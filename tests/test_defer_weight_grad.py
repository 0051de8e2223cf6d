"""DeferWeightGradientPass: a large fc weight gradient moves to the end of backward, exactly."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxcomp.analysis.execution_order import ORDERS, in_run_order, ort_order
from onnxcomp.planner.predict import planned_peak

from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import POLICIES, DeferWeightGradientPass, EagerAccumulationPass
from onnxcomp.passes.defer_weight_grad import GATE_SUFFIX
from onnxcomp.planner.predict import predicted_peak
from onnxcomp.runtime.session import RuntimeSettings

FC1 = "/fc1/Gemm_Grad/Gemm_1"   # fc1's dW = dYᵀ·X: 512 x 4096 floats (8 MiB)


def _build_wide_fc(out_dir: Path) -> Path:
    """Conv-ReLU-MaxPool then a wide fc (4096 -> 512 -> 10): fc1's weight gradient (8 MiB) outweighs
    the stashed activations (batch 8, 3x32x32: 2 MiB ReLU output), like VGG-16's classifier at 64x64."""
    import torch

    from conftest import artifacts_from_net

    torch.manual_seed(0)

    class WideFc(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 64, 3, padding=1)
            self.pool = torch.nn.MaxPool2d(4)
            self.fc1 = torch.nn.Linear(64 * 8 * 8, 512)
            self.fc2 = torch.nn.Linear(512, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.pool(torch.relu(self.conv(x)))
            return self.fc2(torch.relu(self.fc1(torch.flatten(h, 1))))

    meta = {"model": "wide_fc", "batch": 8, "image": [3, 32, 32], "classes": 10, "inputs": ["input"],
            "labels": "labels"}
    return artifacts_from_net(WideFc(), out_dir, batch=8, in_channels=3, height=32, width=32, meta=meta)


@pytest.fixture(scope="module")
def wide_fc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wide_fc(tmp_path_factory.mktemp("wide_fc"))


def _model(art: Path) -> onnx.ModelProto:
    return onnx.load(str(art / "training_model.onnx"))


def _reorder(model: onnx.ModelProto) -> onnx.ModelProto:
    for make in POLICIES["reorder"]:
        model = make().run(model).model
    return model


def test_defers_the_wide_fc_gradient_only(wide_fc: Path) -> None:
    model = _model(wide_fc)
    p = DeferWeightGradientPass()
    result = p.run(model)
    out = result.model
    assert [(d.kind, d["producer"]) for d in result.records] == [("deferred", FC1)] and result.modified
    (rec,) = result.records
    assert rec["gradient_bytes"] == 512 * 4096 * 4
    assert rec["after"] == "conv.weight_grad"           # the first layer's gradient is computed last
    assert rec["predicted_peak_after"] < rec["predicted_peak_before"]
    node = next(n for n in out.graph.node if n.name == FC1)
    assert any(i.endswith(GATE_SUFFIX) for i in node.input)
    # Only the order and the gate changed: the same ops on the same values otherwise.
    assert sorted(n.op_type for n in out.graph.node) == sorted(
        [n.op_type for n in model.graph.node] + ["Reshape", "Slice", "Less", "Cast", "Add", "Reshape"])
    assert predicted_peak(out) == rec["predicted_peak_after"]


def test_planner_refuses_a_deferral_that_does_not_help(small_artifacts: Path) -> None:
    # The small CNN's fc gradient (256 x 10 floats) is below min_bytes; with min_bytes=0 the planner
    # still sees no gain (its activations dominate), so nothing moves unless forced.
    model = _model(small_artifacts)
    p = DeferWeightGradientPass()
    result = p.run(model)
    assert result.model.graph.node == model.graph.node and not result.records and not result.modified
    p = DeferWeightGradientPass(min_bytes=0)
    result = p.run(model)
    assert not result.records
    assert any("not lower the predicted peak" in s.reason for s in result.skipped)
    forced = DeferWeightGradientPass(min_bytes=0, force=True)
    assert [d["producer"] for d in forced.run(model).records] == ["/fc/Gemm_Grad/Gemm_1"]


def test_idempotent_and_after_eager_accumulation(wide_fc: Path) -> None:
    once = DeferWeightGradientPass().run(_model(wide_fc)).model
    p = DeferWeightGradientPass()
    again = p.run(once)
    assert again.model.graph.node == once.graph.node and not again.records and not again.modified
    # Run after the eager pass (order chain present): the chain is rebuilt around the moved accumulator.
    eager_first = DeferWeightGradientPass().run(EagerAccumulationPass().run(_model(wide_fc)).model).model
    assert planned_peak(eager_first, "priority") == planned_peak(_reorder(_model(wide_fc)), "priority")


def test_bad_options() -> None:
    with pytest.raises(OnnxcompError, match="min_bytes"):
        DeferWeightGradientPass(min_bytes=-1)


@pytest.mark.parametrize("order", ORDERS)
def test_runs_last_and_lowers_the_peak_under_both_orders(wide_fc: Path, order: str) -> None:
    base = _model(wide_fc)
    eager = EagerAccumulationPass().run(base).model
    reordered = _reorder(base)
    names = [reordered.graph.node[i].name for i in ort_order(reordered, order)]
    anchor = next(n.name for n in reordered.graph.node if "conv.weight_grad" in n.output)
    assert names.index(FC1) > names.index(anchor)
    # Its accumulator follows at once: the 8 MiB gradient lives for one step of the run order.
    run = in_run_order(reordered, order).graph.node
    k = next(i for i, n in enumerate(run) if n.name == FC1)
    assert run[k + 1].op_type == "InPlaceAccumulatorV2" and run[k + 1].input[1] == "fc1.weight_grad"
    # The planner in ORT's actual run order: lower than eager accumulation alone, by the stashes' bytes.
    assert planned_peak(reordered, order) < planned_peak(eager, order) - (1 << 20)


@pytest.mark.parametrize("order", ORDERS)
def test_bit_identical_training(wide_fc: Path, tmp_path: Path, order: str) -> None:
    from onnxcomp.runtime.train import train

    path = tmp_path / "reorder.onnx"
    onnx.save(_reorder(_model(wide_fc)), str(path))
    settings = RuntimeSettings(execution_order=order)
    base = train(wide_fc, steps=10, data="synthetic", seed=5, progress=False, return_parameters=True,
                 settings=settings)
    new = train(wide_fc, model=str(path), steps=10, data="synthetic", seed=5, progress=False,
                return_parameters=True, settings=settings)
    assert len(set(base.losses)) > 1
    assert base.losses == new.losses
    assert np.array_equal(base.parameters.view(np.uint32), new.parameters.view(np.uint32))


def test_measured_peak_drops(wide_fc: Path, tmp_path: Path) -> None:
    from onnxcomp.runtime.measure import measure

    path = tmp_path / "reorder.onnx"
    onnx.save(_reorder(_model(wide_fc)), str(path))
    eager = tmp_path / "eager.onnx"
    onnx.save(EagerAccumulationPass().run(_model(wide_fc)).model, str(eager))
    before = measure(wide_fc, model=eager, steps=3)
    after = measure(wide_fc, model=path, steps=3)
    # The stashes freed before fc1's dW is computed: the ReLU output (2 MiB) and the MaxPool indices.
    assert after.peak_bytes < before.peak_bytes - (1 << 20), (before.peak_bytes, after.peak_bytes)
