"""The budget planner's input chain at a depthwise-separable net's scale: layers of a few MiB (MobileNetV1-like,
stem → depthwise → pointwise at full resolution) are chunked by the planner; a net whose layers are smaller than
the allocator's slack is left alone; and the chunk count keeps about a MiB of working set per chunk."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxcomp.passes.chunk_input_chain import chain_working_sets, find_input_chains
from onnxcomp.planner import auto
from onnxcomp.planner.auto import Regions, _enable_input_region, apply, predicted_live_both_orders

from conftest import artifacts_from_net

BATCH = 8
MiB = 1 << 20


def _dw_separable(width: int):  # noqa: ANN202
    """Conv-BN-ReLU stem, then one depthwise-separable block (3×3 depthwise, 1×1 pointwise), both at the stem's
    resolution, then a strided block and a linear head."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def cbr(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    class DwNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(*cbr(3, width, 3), *cbr(width, width, 3, groups=width),
                                          *cbr(width, 2 * width, 1), *cbr(2 * width, 2 * width, 3, 2, 2 * width),
                                          *cbr(2 * width, 4 * width, 1), nn.AdaptiveAvgPool2d(1))
            self.fc = nn.Linear(4 * width, 10)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.fc(self.features(x).flatten(1))

    return DwNet()


def _artifacts(root: Path, image: int) -> onnx.ModelProto:
    art = artifacts_from_net(_dw_separable(32), root, batch=BATCH, in_channels=3, height=image, width=image)
    return onnx.load(str(art / "training_model.onnx"))


@pytest.fixture(scope="module")
def mid(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    return _artifacts(tmp_path_factory.mktemp("dw_mid"), 32)      # pointwise layer: 5 MiB working set


def test_depthwise_separable_chain_of_a_few_mib_is_chunked(mid: onnx.ModelProto) -> None:
    chains, _ = find_input_chains(ir.serde.deserialize_model(mid).graph)
    sets = chain_working_sets(chains[0])
    groups = [layer.conv.attributes.get_int("group", 1) for layer in chains[0].layers]
    assert groups[1] > 1, "the depthwise conv is in the chain"
    assert 3 * MiB < max(sets) < 8 * MiB          # a few MiB: below the 8 MiB main used to require
    regions = Regions()
    target = 4 * MiB
    _enable_input_region(mid, regions, target)
    assert regions.input_chain_layers >= 3
    # About a MiB of the largest working set per chunk, not the batch's worth of tiny chunks, and no conv map per
    # chunk under the mmap threshold (test_chain_chunks_keep_conv_maps_above_the_mmap_threshold).
    units = chains[0].layers[:regions.input_chain_layers]
    assert regions.input_block_chunks == max(2, min(round(max(sets[:regions.input_chain_layers]) / MiB),
                                                    auto.mmap_safe_chunks(units)))
    assert 2 <= regions.input_block_chunks < BATCH
    # ... and the chain lowers the planner's floor: the step's predicted peak with the chain chunked, nothing
    # else applied, is below the unchunked one by more than the allocator's slack.
    (p,) = regions.first_passes()
    _, before = predicted_live_both_orders(mid)
    _, after = predicted_live_both_orders(apply(mid, [p]).model)
    assert int(np.max(after)) < int(np.max(before)) - MiB


def test_chain_under_the_allocator_slack_is_left_alone(tmp_path: Path) -> None:
    small = _artifacts(tmp_path / "small", 16)                     # the same net at 16×16: < 1.5 MiB per layer
    chains, _ = find_input_chains(ir.serde.deserialize_model(small).graph)
    assert max(chain_working_sets(chains[0])) < auto.MIN_CHAIN_WORKING_SET
    regions = Regions()
    _enable_input_region(small, regions, 256 << 10)
    assert regions.input_chain_layers == 0


def test_no_chain_on_top_of_a_row_split(mid: onnx.ModelProto) -> None:
    """A row split rewrites the chain's convs first (Regions.first_passes): the chain pass would find nothing,
    so the planner falls back to the input block there, as without the chain."""
    with_rows = Regions(rows=object())
    _enable_input_region(mid, with_rows, 4 * MiB)
    assert with_rows.input_chain_layers == 0 and with_rows.input_block_chunks >= 2
    plain = Regions()
    _enable_input_region(mid, plain, 4 * MiB)
    assert plain.input_chain_layers >= 3


def _conv_output_bytes(units: list) -> list[int]:  # noqa: ANN001
    return [4 * int(np.prod([int(d) for d in n.outputs[0].shape])) for u in units for n in u.forward
            if n.op_type == "Conv"]


def test_chain_chunks_keep_conv_maps_above_the_mmap_threshold(mid: onnx.ModelProto) -> None:
    """By working set alone the chain would take 5 chunks; its strided depthwise map (512 KiB at batch 8) would then
    be 102 KiB per chunk, on glibc's heap, whose free space a step of small tensors touches all over
    (docs/notes/peakjump.md). The planner stops at the count that keeps every conv map at or above the threshold."""
    chains, _ = find_input_chains(ir.serde.deserialize_model(mid).graph)
    regions = Regions()
    _enable_input_region(mid, regions, 4 * MiB)
    units = chains[0].layers[:regions.input_chain_layers]
    sizes = _conv_output_bytes(units)
    assert round(max(chain_working_sets(chains[0])[:len(units)]) / MiB) > regions.input_block_chunks
    assert min(sizes) // regions.input_block_chunks >= auto.MMAP_THRESHOLD, (sizes, regions.input_block_chunks)
    assert auto.mmap_safe_chunks(units) == min(sizes) // auto.MMAP_THRESHOLD == 4
    assert auto.mmap_safe_chunks([]) > BATCH    # nothing to keep above it: no cap
