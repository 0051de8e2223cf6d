"""The planner's chunked input chain stops before layers whose weights are large: the chunked backward holds
every chain layer's weight-gradient total over all chunks (VGG-16's deep 512-channel convs: 9 MiB each)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxcomp.passes.chunk_input_chain import ChunkedInputChainPass, find_input_chains

from conftest import artifacts_from_net

BATCH, IMAGE = 4, 16


def _net():  # noqa: ANN202
    """A BN-free chain: two small convs at full resolution, a pool, then a conv with a wide weight (8 → 64)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class WideTail(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                          nn.Conv2d(8, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
            self.fc = nn.Linear(64 * (IMAGE // 4) ** 2, 10)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.fc(self.features(x).flatten(1))

    return WideTail()


@pytest.fixture(scope="module")
def wide_tail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return artifacts_from_net(_net(), tmp_path_factory.mktemp("wide_tail"), batch=BATCH, in_channels=3,
                              height=IMAGE, width=IMAGE)


def _weight_bytes(chain) -> list[int]:  # noqa: ANN001
    return [4 * int(np.prod([int(d) for d in layer.conv.inputs[1].shape])) for layer in chain.layers]


def test_chain_stops_before_weights_over_an_eighth_of_the_target(wide_tail: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxcomp.planner import auto
    from onnxcomp.planner.auto import Regions, _enable_input_region

    model = onnx.load(str(wide_tail / "training_model.onnx"))
    (chain,), _ = find_input_chains(ir.serde.deserialize_model(model).graph)
    assert len(chain.layers) == 3                        # the structure allows all three
    w = _weight_bytes(chain)
    assert w[0] + w[1] < 8 * 1024 < w[0] + w[1] + w[2]   # 0.8 + 2.3 KiB, then 18 KiB more
    # The selection rule at this graph's scale (the allocator-slack floors are for real nets).
    monkeypatch.setattr(auto, "MIN_CHAIN_WORKING_SET", 0)
    monkeypatch.setattr(auto, "MIN_CHUNK_WORKING_SET", 1)
    # target 64 KiB: every layer's working set (≥ 44 KiB) is above target / 4, but the third layer's weight
    # gradient would take the held totals over target / 8 = 8 KiB.
    regions = Regions()
    _enable_input_region(model, regions, 64 * 1024)
    assert regions.input_chain_layers == 2 and regions.input_block_chunks >= 2
    (p,) = regions.first_passes()
    assert isinstance(p, ChunkedInputChainPass) and p.layers == 2
    # A target whose eighth holds all three weights: the whole chain, as before.
    regions = Regions()
    _enable_input_region(model, regions, 176 * 1024)
    assert regions.input_chain_layers == 3
