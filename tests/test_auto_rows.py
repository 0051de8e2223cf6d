"""Row-split conv chains as a region technique of the lossy budget planner (planner/auto_rows.py).

A hand-written BN-free conv chain whose peak is its convolutions' own working set (no per-stash option lowers
it): the row split is chosen by predicted peak, lowers the floor of the lossy search, is never exact, and the
plan written trains (slow: a torch-exported plain conv stack, measured peak within the budget)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxcomp.planner.auto import Regions, apply, build_passes, encoding_techniques, plan_auto, predicted_live
from onnxcomp.planner.auto_rows import choose_rows

_CONV = 'pads=[1,1,1,1], strides=[1,1], dilations=[1,1], group=1, kernel_shape=[3,3]'

# Conv -> Relu -> Conv -> Relu -> Conv -> squared sum, in ORT's "<tensor>_grad" naming: one row-split chain
# of five layers whose intermediates x, y, z, r are stashed.
CHAIN3 = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[4,3,64,64] input, float[16,3,3,3] w1, float[16,16,3,3] w2, float[16,16,3,3] w3, float loss_grad)
      => (float loss, float[16,3,3,3] w1_grad, float[16,16,3,3] w2_grad, float[16,16,3,3] w3_grad)
{{
  x = Conv <{_CONV}> (input, w1)
  y = Relu (x)
  z = Conv <{_CONV}> (y, w2)
  r = Relu (z)
  u = Conv <{_CONV}> (r, w3)
  uu = Mul (u, u)
  loss = ReduceSum <keepdims=0> (uu)
  two = Constant <value = float {{2.0}}> ()
  g2 = Mul (loss_grad, two)
  u_grad = Mul (u, g2)
  r_grad, w3_grad, b3 = com.microsoft.ConvGrad <{_CONV}> (u_grad, r, w3)
  z_grad = com.microsoft.ReluGrad (r_grad, z)
  y_grad, w2_grad, b2 = com.microsoft.ConvGrad <{_CONV}> (z_grad, y, w2)
  x_grad = com.microsoft.ReluGrad (y_grad, x)
  input_grad, w1_grad, b1 = com.microsoft.ConvGrad <{_CONV}> (x_grad, input, w1)
}}
"""


def _chain3() -> onnx.ModelProto:
    model = onnx.parser.parse_model(CHAIN3)
    for k, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{k}"
        if node.output[0] == "input_grad":
            node.output[0] = ""
    return model


def _baseline_peak(model: onnx.ModelProto) -> int:
    _, live = predicted_live(model, eager_accumulation=False)
    return int(live.max())


def test_row_split_is_chosen_by_predicted_peak_and_runs_first_in_the_pipeline() -> None:
    model = _chain3()
    base = _baseline_peak(model)
    choice = choose_rows(model, base)
    assert choice is not None and choice.chains
    assert choice.predicted_peak < base
    # The plan's pipeline row-splits before anything else (the chain finder needs the original backward ops).
    passes = build_passes({}, Regions(rows=choice), encoding_techniques(), 64 * 1024)
    assert passes[0].name == "row_split" and passes[0].rows == choice.rows
    out = apply(model, passes).model
    stashed_before = {n for node in model.graph.node for n in node.output}
    assert not {"x", "y", "z", "r"} & {n for node in out.graph.node for n in node.input
                                       if node.op_type == "ConvGrad" and n in stashed_before}
    rec = choice.record()
    assert rec["technique"] == "row_split" and rec["exact"] is False
    # No chain to split (a lone ReLU graph would have none): no choice, never an error.
    assert choose_rows(model, choice.predicted_peak) is None or choose_rows(model, 0) is None


@pytest.mark.slow
def test_lossy_floor_falls_with_the_row_split_and_exact_never_takes_it() -> None:
    model = _chain3()
    without = plan_auto(model, 1 << 12, rows=None)
    with_rows = plan_auto(model, 1 << 12)
    assert with_rows.regions.rows is not None
    assert with_rows.predicted_peak < without.predicted_peak
    assert any(d["technique"] == "row_split" and not d["exact"] for d in with_rows.decisions())
    exact = plan_auto(model, 1 << 12, exact=True)
    assert exact.regions.rows is None


@pytest.mark.slow
# (16, 64): 8-row blocks of 512 KiB; every block's recomputed MaxPool values, unread, stayed allocated to the end
# of the step and the plan measured 4.7-5.6 MB against a 5.07 MB budget (NOTES-rowsplit.md).
@pytest.mark.parametrize("batch,size", [(8, 48), (16, 64)])
def test_plain_conv_stack_auto_plan_with_rows_fits_when_measured(tmp_path: Path, batch: int, size: int) -> None:
    import torch
    from torch import nn

    from conftest import artifacts_from_net
    from onnxcomp.planner.auto import tightest_budget_for
    from onnxcomp.runtime.measure import measure
    from onnxcomp.transform import transform

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(32 * (size // 4) ** 2, 10))
    meta = {"model": "plain_stack", "batch": batch, "image": [3, size, size], "classes": 10, "inputs": ["input"],
            "labels": "labels"}
    art = artifacts_from_net(net, tmp_path / "art", batch=batch, in_channels=3, height=size, width=size, meta=meta)
    model = onnx.load(str(art / "training_model.onnx"))
    floor = plan_auto(model, 1 << 16)
    assert floor.regions.rows is not None, floor.decisions()
    budget = tightest_budget_for(floor.predicted_peak) + (64 << 10)
    out = art / "auto.onnx"
    result = transform(art, out, "auto", budget_bytes=budget)
    assert result.section("auto")[0]["fits"]
    base = measure(art, steps=2)
    m = measure(art, model=out, steps=2)
    assert m.peak_bytes <= budget, (m.peak_bytes, budget)
    assert m.peak_bytes < base.peak_bytes
    assert np.all(np.isfinite(m.losses))


def test_row_counts_with_blocks_under_the_heap_floor_are_not_chosen() -> None:
    from onnxcomp.planner.auto_rows import MIN_ROW_BLOCK_BYTES

    model = _chain3()
    base = _baseline_peak(model)
    largest = 4 * 16 * 64 * 64 * 4            # a conv output of the chain: 1 MiB
    choice = choose_rows(model, base)
    assert choice is not None and largest // choice.rows >= MIN_ROW_BLOCK_BYTES
    # 8 rows would leave 128 KiB blocks (glibc's heap, not mmap): never chosen, though predicted lower.
    assert largest // 8 < MIN_ROW_BLOCK_BYTES
    assert choose_rows(model, base, candidates=((8, True),)) is None


def test_nchwc_copy_of_a_single_output_pool_input_is_predicted(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from onnx import helper

    from onnxcomp.planner import predict

    def tensor(*shape: int) -> SimpleNamespace:
        return SimpleNamespace(shape=shape, nbytes=4 * int(np.prod(shape)))

    analysis = SimpleNamespace(tensors={"x": tensor(4, 16, 32, 32), "x3": tensor(4, 3, 32, 32)})
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    single = helper.make_node("MaxPool", ["x"], ["y"], **pool)
    with_indices = helper.make_node("MaxPool", ["x"], ["z", "zi"], **pool)
    odd_channels = helper.make_node("AveragePool", ["x3"], ["w"], **pool)
    for block in (8, 16):
        monkeypatch.setattr(predict, "nchwc_block_size", lambda block=block: block)
        assert predict.nchwc_reorder_workspace(analysis, single) == 4 * 16 * 32 * 32 * 4
        assert predict.nchwc_reorder_workspace(analysis, with_indices) == 0      # ORT keeps it NCHW
        assert predict.nchwc_reorder_workspace(analysis, odd_channels) == 0      # 3 channels: not blocked
    monkeypatch.setattr(predict, "nchwc_block_size", lambda: 0)                 # no NCHWc on this CPU
    assert predict.nchwc_reorder_workspace(analysis, single) == 0
