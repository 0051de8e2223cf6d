"""ChunkedInputChainPass: several layers from the graph input (Conv [BN] [ReLU|LeakyReLU] [MaxPool], two convs
before a pool) run forward and backward in batch chunks. BN-free: the forward is ORT's bit for bit; with
BatchNorm: trains like the original up to rounding and keeps the running statistics."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcomp.analysis import analyze_model
from onnxcomp.analysis.execution_order import ORDERS
from onnxcomp.passes.chunk_input_block import ChunkedInputBlockPass
from onnxcomp.passes.chunk_input_chain import ChunkedInputChainPass, chain_working_sets, find_input_chains
from onnxcomp.planner.predict import planned_peak

from conftest import artifacts_from_net

BATCH, IMAGE = 4, 16


def _net(batchnorm: bool):  # noqa: ANN202
    """Two convs at full resolution before a pool (VGG's block), LeakyReLU with BatchNorm, then a second stage
    whose output goes to the classifier."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def layer(cin: int, cout: int, leaky: bool) -> list[nn.Module]:
        act = nn.LeakyReLU(0.1) if leaky and batchnorm else nn.ReLU()
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=not batchnorm),
                *([nn.BatchNorm2d(cout)] if batchnorm else []), act]

    class ChainCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(*layer(3, 8, True), *layer(8, 8, True), nn.MaxPool2d(2),
                                          *layer(8, 16, False), nn.MaxPool2d(2))
            self.fc = nn.Linear(16 * (IMAGE // 4) ** 2, 10)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.fc(self.features(x).flatten(1))

    return ChainCNN()


@pytest.fixture(scope="module")
def bn_chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return artifacts_from_net(_net(True), tmp_path_factory.mktemp("bn_chain"), batch=BATCH, in_channels=3,
                              height=IMAGE, width=IMAGE)


@pytest.fixture(scope="module")
def plain_chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return artifacts_from_net(_net(False), tmp_path_factory.mktemp("plain_chain"), batch=BATCH, in_channels=3,
                              height=IMAGE, width=IMAGE)


def _batches(steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [(rng.standard_normal((BATCH, 3, IMAGE, IMAGE)).astype(np.float32),
             rng.integers(0, 10, BATCH).astype(np.int64)) for _ in range(steps)]


def _train(art: Path, model: Path | None, steps: int) -> tuple[list[float], dict, dict]:
    """Losses, the first step's gradients, the checkpoint state's buffers after ``steps`` AdamW steps."""
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    from onnxcomp.runtime.session import session_options

    state = CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = Module(str(model or art / "training_model.onnx"), state, session_options=session_options())
    optimizer = Optimizer(str(art / "optimizer_model.onnx"), module)
    module.train()
    losses, grads = [], {}
    for k, (x, y) in enumerate(_batches(steps)):
        losses.append(float(module(x, y)))
        if k == 0:
            grads = {name: np.array(p.grad) for name, p in state.parameters if p.grad is not None}
        optimizer.step()
        module.lazy_reset_grad()
    # ORT's BatchNormInternal updates these buffers in place (the eval model reads them).
    running = {name: np.array(p.data) for name, p in state.parameters if name.endswith(("running_mean", "running_var"))}
    return losses, grads, running


def _chunked(art: Path, tmp: Path, chunks: int, layers: int | None = None) -> tuple[Path, dict]:
    result = ChunkedInputChainPass(chunks=chunks, layers=layers).run(onnx.load(str(art / "training_model.onnx")))
    (rec,) = result.records
    path = tmp / f"chain{chunks}.onnx"
    onnx.save(result.model, str(path))
    return path, rec


def test_finds_the_chain_by_structure(bn_chain: Path, plain_chain: Path) -> None:
    import onnx_ir as ir

    for art, bn in ((bn_chain, True), (plain_chain, False)):
        model = onnx.load(str(art / "training_model.onnx"))
        (chain,), _ = find_input_chains(ir.serde.deserialize_model(model).graph)
        # Three layers: the stage's two convs (one ending in the pool) and the next stage's conv, whose pooled
        # output leaves the chain for the classifier.
        assert len(chain.layers) == 3 and chain.batchnorms == (3 if bn else 0)
        assert [l.pool is not None for l in chain.layers] == [False, True, True]
        assert chain.layers[0].act.op_type == ("LeakyRelu" if bn else "Relu")
        sets = chain_working_sets(chain)
        assert sets[1] > sets[2]                    # the second conv works at full resolution
        (short,), _ = find_input_chains(ir.serde.deserialize_model(model).graph, max_layers=2)
        assert len(short.layers) == 2


def test_rewrites_and_drops_the_chain_stashes(bn_chain: Path) -> None:
    model = onnx.load(str(bn_chain / "training_model.onnx"))
    result = ChunkedInputChainPass(chunks=2).run(model)
    (rec,) = result.records
    assert rec.kind == "chunked" and rec["exact"] is False and rec["batchnorms"] == 3 and len(rec["layers"]) == 3
    out = result.model
    before = {s.name for s in analyze_model(model).stashed}
    after = {s.name for s in analyze_model(out).stashed}
    assert set(rec["dropped_stashes"]) & before and not set(rec["dropped_stashes"]) & after
    assert sum(s.nbytes for s in analyze_model(out).stashed) < sum(s.nbytes for s in analyze_model(model).stashed)
    # Every BatchNorm node stays, only to update its running statistics from a 2-sample stand-in.
    bns = [n for n in out.graph.node if n.op_type == "BatchNormInternal"]
    assert len(bns) == 3 and all(n.name.startswith("onnxcomp_inchain") for n in bns)
    # ORT keeps an output nobody reads until the end of the step (the planner does not count it): the recomputed
    # chunks make none but the last chunk's top pool output (MaxPool must make it; ConvTranspose, not ConvGrad,
    # gives the sums passes their input gradients).
    read = {i for n in out.graph.node for i in n.input} | {o.name for o in out.graph.output}
    unread = [(n.op_type, o) for n in out.graph.node if n.name.startswith("onnxcomp_inchain")
              and n.op_type != "BatchNormInternal" for o in n.output if o and o not in read]
    assert len(unread) <= 1 and all(op == "MaxPool" for op, _ in unread), unread
    again = ChunkedInputChainPass(chunks=2).run(out)
    assert not again.records and not again.modified


@pytest.mark.parametrize("chunks", [2, 3])
def test_batchnorm_chain_trains_like_the_original(bn_chain: Path, tmp_path: Path, chunks: int) -> None:
    # 3 chunks of 4 are uneven (1, 2, 1): both BatchNorms' merged statistics must weigh them right.
    path, _ = _chunked(bn_chain, tmp_path, chunks)
    base_losses, base_grads, base_stats = _train(bn_chain, None, 3)
    losses, grads, stats = _train(bn_chain, path, 3)
    assert len(set(base_losses)) > 1
    np.testing.assert_allclose(losses, base_losses, rtol=1e-4)
    for name, g in base_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-3, atol=1e-5 * max(1.0, np.abs(g).max()), err_msg=name)
    assert len(base_stats) == 6                       # 3 BatchNorms × mean, var
    initial = _train(bn_chain, None, 0)[2]
    for name, s in base_stats.items():
        assert not np.allclose(s, initial[name], rtol=1e-3), name          # training moved them
        np.testing.assert_allclose(stats[name], s, rtol=2e-5, atol=1e-6, err_msg=name)


def test_batchnorm_sums_are_checked(bn_chain: Path, tmp_path: Path) -> None:
    """The comparison above can fail: the upper BatchNorm's input gradient without its Σg·x̂ term."""
    out = onnx.load(str(_chunked(bn_chain, tmp_path, 2)[0]))
    mean_gx = [n for n in out.graph.node if n.op_type == "Mul" and "_mean_gx" in n.output[0]]
    assert len(mean_gx) == 3
    mean_gx[0].input[1] = mean_gx[0].input[0]        # Σg·x̂ · Σg·x̂ instead of Σg·x̂ / M
    path = tmp_path / "broken.onnx"
    onnx.save(out, str(path))
    _, base_grads, _ = _train(bn_chain, None, 1)
    _, grads, _ = _train(bn_chain, path, 1)
    assert max(np.abs(grads[n] - g).max() / max(np.abs(g).max(), 1e-12) for n, g in base_grads.items()) > 1e-2


def test_batchnorm_free_chain_forward_is_bit_identical(plain_chain: Path, tmp_path: Path) -> None:
    path, rec = _chunked(plain_chain, tmp_path, 3)
    assert rec["batchnorms"] == 0
    base_losses, base_grads, _ = _train(plain_chain, None, 1)
    losses, grads, _ = _train(plain_chain, path, 1)
    assert losses == base_losses                     # every op of the chain works image by image
    for name, g in base_grads.items():              # the weight gradients: sums over the chunks
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=1e-6 * max(1.0, np.abs(g).max()), err_msg=name)


@pytest.mark.parametrize("order", ORDERS)
def test_planned_peak_drops_below_the_input_block_alone(bn_chain: Path, order: str) -> None:
    from onnxcomp.passes.chunk_input_chain import ChunkedInputChainPass as Chain

    model = onnx.load(str(bn_chain / "training_model.onnx"))
    one = Chain(chunks=4, layers=1).run(model).model
    three = Chain(chunks=4, layers=3).run(model).model
    # The second conv's input, output and BN output (4x8x16x16 floats, 32 KiB each) no longer coexist.
    assert planned_peak(three, order) < planned_peak(one, order) - 32 * 1024
    assert planned_peak(one, order) <= planned_peak(model, order)


def test_planner_takes_the_chain_where_its_layers_are_over_the_target(bn_chain: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxcomp.planner import auto
    from onnxcomp.planner.auto import Regions, _enable_input_region

    model = onnx.load(str(bn_chain / "training_model.onnx"))
    regions = Regions()
    _enable_input_region(model, regions, 64 * 1024)      # a chain of a few KiB: under the allocator's slack
    assert regions.input_chain_layers == 0
    # The selection rule itself, at this test graph's scale:
    monkeypatch.setattr(auto, "MIN_CHAIN_WORKING_SET", 0)
    monkeypatch.setattr(auto, "MIN_CHUNK_WORKING_SET", 1)
    regions = Regions()
    _enable_input_region(model, regions, 64 * 1024)      # every layer's working set (≥ 24 KiB) > target / 4
    assert regions.input_chain_layers == 3 and regions.input_block_chunks >= 2
    (p,) = regions.first_passes()
    assert isinstance(p, ChunkedInputChainPass) and p.layers == 3
    regions = Regions()
    _enable_input_region(model, regions, 1 << 30)         # nothing large: the input block alone, as before
    assert regions.input_chain_layers == 0
    (p,) = regions.first_passes()
    assert isinstance(p, ChunkedInputBlockPass)
