"""ChunkedInputChainPass through residual blocks: the stem, an identity block and a downsample block (a branch
Conv→BN→ReLU→Conv→BN beside the identity or a strided 1×1 Conv+BN, joined by Add → ReLU) found by structure and
run forward and backward in batch chunks; losses, every parameter gradient and every BatchNorm's running
statistics match the unchunked graph up to rounding."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcomp.passes.chunk_input_chain import ChunkedInputChainPass, ResidualBlock, find_input_chains

from conftest import artifacts_from_net
from test_chunk_input_chain import _train

BATCH, IMAGE = 4, 16


def _resnet():  # noqa: ANN202
    """A ResNet in miniature: stem (Conv-BN-ReLU-MaxPool), an identity block, a downsample block, a head."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

        def forward(self, x):  # noqa: ANN001, ANN202
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class TinyResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(2))
            self.layer1 = Block(8, 8, 1)
            self.layer2 = Block(8, 16, 2)
            self.layer3 = Block(16, 16, 1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):  # noqa: ANN001, ANN202
            y = self.layer3(self.layer2(self.layer1(self.stem(x))))
            return self.fc(y.mean((2, 3)))

    return TinyResNet()


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return artifacts_from_net(_resnet(), tmp_path_factory.mktemp("tiny_resnet"), batch=BATCH, in_channels=3,
                              height=IMAGE, width=IMAGE)


def _chunked(art: Path, tmp: Path, chunks: int, layers: int | None) -> tuple[Path, dict]:
    result = ChunkedInputChainPass(chunks=chunks, layers=layers).run(onnx.load(str(art / "training_model.onnx")))
    (rec,) = result.records
    path = tmp / f"chain{chunks}_{layers}.onnx"
    onnx.save(result.model, str(path))
    return path, rec


def test_finds_residual_blocks_by_structure(resnet: Path) -> None:
    import onnx_ir as ir

    model = onnx.load(str(resnet / "training_model.onnx"))
    (chain,), skipped = find_input_chains(ir.serde.deserialize_model(model).graph)
    # The stem, then the three blocks; the chain ends where the last block's output leaves for the head.
    assert len(chain.layers) == 4 and all(isinstance(u, ResidualBlock) for u in chain.layers[1:])
    ops = [[n.op_type for n in u.forward] for u in chain.layers[1:]]
    assert ops[0] == ["Conv", "BatchNormInternal", "Relu", "Conv", "BatchNormInternal", "Add", "Relu"]
    assert sorted(ops[1]) == sorted(["Conv", "BatchNormInternal", "Relu", "Conv", "BatchNormInternal",
                                     "Conv", "BatchNormInternal", "Add", "Relu"])     # the downsample block
    assert chain.batchnorms == 1 + 2 + 3 + 2
    assert any("the chain ends" in s.reason for s in skipped)
    # Without blocks, the chain stops at the stem (its output branches); max_layers stops it between blocks.
    (stem,), _ = find_input_chains(ir.serde.deserialize_model(model).graph, blocks=False)
    assert len(stem.layers) == 1
    (two,), _ = find_input_chains(ir.serde.deserialize_model(model).graph, max_layers=2)
    assert len(two.layers) == 2


def test_rewrite_drops_the_chain_stashes_and_leaves_no_unread_output(resnet: Path) -> None:
    from onnxcomp.analysis import analyze_model

    model = onnx.load(str(resnet / "training_model.onnx"))
    result = ChunkedInputChainPass(chunks=2, layers=3).run(model)
    (rec,) = result.records
    assert rec["blocks"] == 2 and rec["batchnorms"] == 6
    out = result.model
    after = {s.name for s in analyze_model(out).stashed}
    assert not set(rec["dropped_stashes"]) & after
    read = {i for n in out.graph.node for i in n.input} | {o.name for o in out.graph.output}
    unread = [(n.op_type, o) for n in out.graph.node if n.name.startswith("onnxcomp_inchain")
              and n.op_type != "BatchNormInternal" for o in n.output if o and o not in read]
    assert not unread, unread
    # The old backward is gone: no Sum/Identity of the chain's gradients remains.
    names = set(rec["dropped_stashes"])
    assert not [n for n in out.graph.node if n.op_type in ("Sum", "Identity")
                and any(i.replace("_grad", "").rstrip("_01") in names for i in n.input)]


@pytest.mark.parametrize(("chunks", "layers"), [(2, 2), (3, 3), pytest.param(3, None, marks=pytest.mark.slow)])
def test_residual_chain_trains_like_the_original(resnet: Path, tmp_path: Path, chunks: int, layers: int | None
                                                 ) -> None:
    # 3 chunks of 4 are uneven (1, 2, 1). layers=2: the stem and the identity block; 3: + the downsample block;
    # None: all four units.
    path, rec = _chunked(resnet, tmp_path, chunks, layers)
    assert rec["blocks"] == (layers or 4) - 1
    base_losses, base_grads, base_stats = _train(resnet, None, 3)
    losses, grads, stats = _train(resnet, path, 3)
    assert len(set(base_losses)) > 1
    np.testing.assert_allclose(losses, base_losses, rtol=1e-4)
    assert len(base_grads) == len(grads) == 8 + 2 * 8 + 2     # 8 convs, 8 BatchNorms (γ, β), the head
    for name, g in base_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-3, atol=1e-5 * max(1.0, np.abs(g).max()), err_msg=name)
    initial = _train(resnet, None, 0)[2]
    assert len(base_stats) == 2 * 8
    for name, s in base_stats.items():
        assert not np.allclose(s, initial[name], rtol=1e-3), name
        np.testing.assert_allclose(stats[name], s, rtol=2e-5, atol=1e-6, err_msg=name)


def test_a_broken_block_gradient_is_caught(resnet: Path, tmp_path: Path) -> None:
    """The comparison above can fail: drop the identity path's share of the residual gradient (the first
    gradient fan-in Add of the final backward pass reads its branch input twice)."""
    path, _ = _chunked(resnet, tmp_path, 2, 2)
    out = onnx.load(str(path))
    fan_in = [n for n in out.graph.node if n.op_type == "Add" and "_dsum" in n.output[0]]
    assert fan_in
    fan_in[-1].input[0] = fan_in[-1].input[1]
    broken = tmp_path / "broken.onnx"
    onnx.save(out, str(broken))
    _, base_grads, _ = _train(resnet, None, 1)
    _, grads, _ = _train(resnet, broken, 1)
    assert max(np.abs(grads[n] - g).max() / max(np.abs(g).max(), 1e-12) for n, g in base_grads.items()) > 1e-2


def test_planner_takes_blocks_only_when_stuck_and_one_more_at_a_time(resnet: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxcomp.planner import auto
    from onnxcomp.planner.auto import Regions, _enable_input_region, _input_chain

    model = onnx.load(str(resnet / "training_model.onnx"))
    monkeypatch.setattr(auto, "MIN_CHAIN_WORKING_SET", 0)
    monkeypatch.setattr(auto, "MIN_CHUNK_WORKING_SET", 1)
    target = 16 * 1024
    # First enabled: the chain of layers only, which stops at the stem here: the stem's input block, as before.
    regions = Regions()
    _enable_input_region(model, regions, target)
    assert regions.input_chain_layers == 0 and regions.input_block_chunks >= 2
    # Stuck: through the residual blocks, one unit more each time (or through the block at the peak).
    assert _input_chain(model, target, further=True, at_least=2)[0] == 2
    assert _input_chain(model, target, further=True, at_least=3)[0] == 3
    _enable_input_region(model, regions, target, further=True, at_least=3)
    assert regions.input_chain_layers == 3
    (p,) = regions.first_passes()
    assert isinstance(p, ChunkedInputChainPass) and p.layers == 3 and p.blocks
    # A large target: only units whose working set is above a sixteenth of it (the stem alone: no chain).
    assert _input_chain(model, 1 << 30, further=True, at_least=3) == (0, 0)
