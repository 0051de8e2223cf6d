"""SplitWeightPass(bit_identical=True): row blocks on MLAS's 128-row reduction grid with dX chained through
Gemm's C input train bit for bit like the whole weight (passes/exact_gemm.py); the same chain over blocks off
that grid does not, which is what makes the equality below a real check."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcomp.passes import SplitWeightPass
from onnxcomp.passes.exact_gemm import aligned_bounds, chunks_by_128, exact_row_bounds, slice_widths, stride_k
from onnxcomp.passes.split_weight import splits_made
from onnxcomp.runtime.checkpoint import write_split_artifacts

from conftest import artifacts_from_net

FC1 = "3.weight"          # Linear(256 -> 512): 512 KiB, split into two 256-row blocks
BLOCK_BYTES = 256 << 10
BATCH = 4
THREADS = 2               # the guarantee asked for (intra-op thread counts 1..THREADS)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 8 * 8, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    return artifacts_from_net(net, tmp_path_factory.mktemp("exactsplit") / "mlp", batch=BATCH, in_channels=3,
                              height=8, width=8)


def _split_dir(mlp: Path, out: Path, bit_identical: bool, block_bytes: int = BLOCK_BYTES) -> tuple[Path, list]:
    result = SplitWeightPass(block_bytes, bit_identical=bit_identical, max_threads=THREADS).run(
        onnx.load(str(mlp / "training_model.onnx")))
    out.mkdir()
    onnx.save(result.model, str(out / "training_model.onnx"))
    shutil.copy2(mlp / "optimizer_model.onnx", out / "optimizer_model.onnx")
    write_split_artifacts(mlp, out, splits_made(result))
    return out, splits_made(result)


def _train(art: Path, steps: int, threads: int) -> tuple[list[float], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Losses, the first step's gradients and the parameters after ``steps`` AdamW steps."""
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    from onnxcomp.runtime.session import session_options

    rng = np.random.default_rng(11)
    state = CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = Module(str(art / "training_model.onnx"), state, session_options=session_options(intra_threads=threads))
    optimizer = Optimizer(str(art / "optimizer_model.onnx"), module)
    module.train()
    losses, grads = [], {}
    for k in range(steps):
        x = rng.standard_normal((BATCH, 3, 8, 8)).astype(np.float32)
        y = rng.integers(0, 10, BATCH).astype(np.int64)
        losses.append(float(module(x, y)))
        if k == 0:
            grads = {name: np.array(p.grad) for name, p in state.parameters}
        optimizer.step()
        module.lazy_reset_grad()
    return losses, grads, {name: np.array(p.data) for name, p in state.parameters}


def _whole(values: dict[str, np.ndarray], parts: tuple[str, ...]) -> dict[str, np.ndarray]:
    out = {k: v for k, v in values.items() if k not in parts}
    out[FC1] = np.concatenate([values[p] for p in parts])
    return out


def test_exact_split_trains_bit_identical(mlp: Path, tmp_path: Path) -> None:
    exact_dir, splits = _split_dir(mlp, tmp_path / "exact", bit_identical=True)
    assert [s.bounds for s in splits] == [(0, 256, 512)]
    dx = [n for n in onnx.load(str(exact_dir / "training_model.onnx")).graph.node
          if n.op_type == "Gemm" and len(n.input) == 3 and "dx" in n.name]
    assert len(dx) == 1     # the second block's dX Gemm reads the first one's as C
    # 200 KiB blocks: rows 0/171/342/512, off MLAS's 128-row chunks of dX's reduction.
    off_dir, off = _split_dir(mlp, tmp_path / "off_grid", bit_identical=False, block_bytes=200 << 10)
    assert [s.bounds for s in off] == [(0, 171, 342, 512)]
    parts = splits[0].parts
    for threads in (1, THREADS):
        base = _train(mlp, 4, threads)
        exact = _train(exact_dir, 4, threads)
        assert exact[0] == base[0]
        for got, want in zip(exact[1:], base[1:]):
            got = _whole(got, parts)
            assert set(got) == set(want)
            for name in want:
                assert np.array_equal(got[name], want[name]), (threads, name)
        # The control: the same chain over blocks off the grid rounds dX differently, so the conv below differs.
        off_grid = _train(off_dir, 4, threads)
        assert not np.array_equal(off_grid[1]["0.weight"], base[1]["0.weight"])


def test_exact_bounds_follow_mlas() -> None:
    # VGG-16's fc1 (4096×25088, batch 32): 128-row grid, as many blocks as 16 threads allow, fewer for more.
    b16 = exact_row_bounds(4096, 25088, 32, 12, 16)
    assert b16 == (0, 1408, 2816, 4096) and all(b % 128 == 0 for b in b16)
    assert len(exact_row_bounds(4096, 25088, 32, 12, 8)) - 1 > len(b16) - 1
    assert "batch" in exact_row_bounds(4096, 25088, 1, 4, 16)
    assert isinstance(exact_row_bounds(256, 256, 4, 4, 64), str)     # slices of ≤ 64 columns at 64 threads
    # MLAS's stride rule: a slice of ≤ 64 columns doubles the chunk; a reduction ≤ 64 halves it.
    assert stride_k(65, 4096) == 128 and stride_k(64, 4096) == 256 and stride_k(4096, 64) == 64
    assert slice_widths(32, 143, 4096, 2) == [80, 63] and not chunks_by_128(32, 143, 4096, 2)
    assert aligned_bounds(700, 4) == (0, 256, 512, 640, 700) and aligned_bounds(200, 3) is None


def test_rule_matches_ort_gemms() -> None:
    """Where the rule says exact, ORT's Gemms agree bit for bit (forward per-block Gemm + Concat, dX chain)."""
    from onnx import helper

    from onnxcomp.passes.exact_gemm import probe_session, split_probe_graphs

    def run(nodes: list, inits: list, feeds: dict[str, np.ndarray], threads: int) -> np.ndarray:
        return probe_session(nodes, inits, feeds, threads).run(None, feeds)[0]

    rng = np.random.default_rng(5)
    for batch, cols, rows in [(8, 512, 1000), (2, 200, 640)]:
        bounds = exact_row_bounds(rows, cols, batch, 4, THREADS)
        assert not isinstance(bounds, str)
        x, w = rng.standard_normal((batch, cols), np.float32), rng.standard_normal((rows, cols), np.float32)
        dy = rng.standard_normal((batch, rows), np.float32)
        (fwd, inits), (dx, _) = split_probe_graphs(bounds)
        for threads in (1, THREADS):
            whole_fwd = run([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], [], {"x": x, "w": w}, threads)
            whole_dx = run([helper.make_node("Gemm", ["dy", "w"], ["y"])], [], {"dy": dy, "w": w}, threads)
            assert np.array_equal(run(fwd, inits, {"x": x, "w": w}, threads), whole_fwd)
            assert np.array_equal(run(dx, inits, {"dy": dy, "w": w}, threads), whole_dx)
