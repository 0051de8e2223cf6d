"""ChunkedInputChainPass through pre-activation residual blocks (wide ResNet, ResNet v2): a block ends in its
Add, whose gradient no backward op of its own reads, so the next block's pre-activation BatchNorm → ReLU joins
the block and the chain goes on from the ReLU's output. Found by structure on the suite's WRN at a narrow width;
the chunked graph trains like the original up to rounding."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcomp.passes.chunk_input_chain import ChunkedInputChainPass, ResidualBlock, find_input_chains

from conftest import artifacts_from_net
from test_chunk_input_chain import BATCH, IMAGE, _train


@pytest.fixture(scope="module")
def wrn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from onnxcomp.models.suite import build_suite_model

    torch.manual_seed(0)
    net = build_suite_model("wide_resnet_s", num_classes=10, width=0.25)  # channels 4, 16, 32, 64
    return artifacts_from_net(net, tmp_path_factory.mktemp("tiny_wrn"), batch=BATCH, in_channels=3,
                              height=IMAGE, width=IMAGE)


def test_chain_goes_through_preactivation_blocks(wrn: Path) -> None:
    import onnx_ir as ir

    model = onnx.load(str(wrn / "training_model.onnx"))
    (chain,), _ = find_input_chains(ir.serde.deserialize_model(model).graph)
    # The stem conv with the first block's BN-ReLU, then the three blocks, each closed by the next block's (the
    # last: the head's) pre-activation BN-ReLU.
    assert len(chain.layers) == 4 and all(isinstance(u, ResidualBlock) for u in chain.layers[1:])
    for unit in chain.layers[1:]:
        ops = [n.op_type for n in unit.forward]
        assert sorted(ops) == sorted(["Conv", "Conv", "BatchNormInternal", "Relu", "Conv", "Add",
                                      "BatchNormInternal", "Relu"])
        assert ops[-3:] == ["Add", "BatchNormInternal", "Relu"]
    assert chain.batchnorms == 1 + 3 * 2
    # Without the pre-activation tail the first block could not end (its Add's gradient has no reader of its
    # own): the chain would stop at the stem layer, as it did before.
    (stem,), _ = find_input_chains(ir.serde.deserialize_model(model).graph, blocks=False)
    assert len(stem.layers) == 1


@pytest.mark.parametrize(("chunks", "layers"), [(2, 2), (3, None)])
def test_preactivation_chain_trains_like_the_original(wrn: Path, tmp_path: Path, chunks: int,
                                                      layers: int | None) -> None:
    result = ChunkedInputChainPass(chunks=chunks, layers=layers).run(onnx.load(str(wrn / "training_model.onnx")))
    (rec,) = result.records
    assert rec["blocks"] == (layers or 4) - 1
    path = tmp_path / "chained.onnx"
    onnx.save(result.model, str(path))
    base_losses, base_grads, base_stats = _train(wrn, None, 3)
    losses, grads, stats = _train(wrn, path, 3)
    assert len(set(base_losses)) > 1
    # Rounding only: BatchNorm statistics merged over chunks, weight gradients summed over chunks.
    np.testing.assert_allclose(losses, base_losses, rtol=1e-4)
    assert len(base_grads) == len(grads) == 10 + 2 * 7 + 2    # 10 convs, 7 BatchNorms (γ, β), the head
    for name, g in base_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-3, atol=1e-5 * max(1.0, np.abs(g).max()), err_msg=name)
    for name, s in base_stats.items():
        np.testing.assert_allclose(stats[name], s, rtol=2e-5, atol=1e-6, err_msg=name)
