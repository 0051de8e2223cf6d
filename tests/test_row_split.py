"""Row-split (LR-CNN OverL / 2PS) pass: losses and every parameter gradient equal to the unsplit graph."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import artifacts_from_net
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes.base import check_model
from onnxcomp.passes.row_split import RowSplitPass
from onnxcomp.planner.predict import predicted_peak

torch = pytest.importorskip("torch")
nn = torch.nn

RTOL = 1e-5
ATOL = 1e-7   # absolute floor for gradient entries that are (near) zero; sums run in a different order


# ------------------------------------------------------------------------------------------------ helpers

def build_artifacts(net: "nn.Module", out_dir: Path, *, batch: int, in_ch: int, height: int, width: int,
                    seed: int = 0) -> Path:
    """Export ``net`` (training mode, static shapes) and generate ORT training artifacts in out_dir."""
    return artifacts_from_net(net, out_dir, batch=batch, in_channels=in_ch, height=height, width=width)


def train_step(art_dir: Path, model: onnx.ModelProto, x: np.ndarray, labels: np.ndarray,
               execution_order: str = "priority") -> tuple[float, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One training step with the ORT training API: (loss, gradients, parameters after one AdamW step)."""
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    from onnxcomp.runtime.session import session_options

    path = art_dir / f"rows_probe_{id(model)}.onnx"
    onnx.save(model, str(path))
    state = CheckpointState.load_checkpoint(str(art_dir / "checkpoint"))
    module = Module(str(path), state, None, device="cpu",
                    session_options=session_options(execution_order=execution_order))
    opt = Optimizer(str(art_dir / "optimizer_model.onnx"), module)
    module.train()
    module.lazy_reset_grad()
    loss = float(np.asarray(module(x, labels)))
    grads = {n: np.array(p.grad) for n, p in state.parameters if p.requires_grad}
    opt.step()
    params = {n: np.array(p.data) for n, p in state.parameters if p.requires_grad}
    path.unlink()
    return loss, grads, params


def assert_same_step(art_dir: Path, rewritten: onnx.ModelProto, *, batch: int, in_ch: int, height: int,
                     width: int, classes: int, execution_order: str = "priority", seed: int = 1,
                     atol_scale: float = ATOL, check_params: bool = True) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, in_ch, height, width)).astype(np.float32)
    labels = rng.integers(0, classes, size=batch).astype(np.int64)
    base = onnx.load(str(art_dir / "training_model.onnx"))
    loss0, g0, p0 = train_step(art_dir, base, x, labels, execution_order)
    loss1, g1, p1 = train_step(art_dir, rewritten, x, labels, execution_order)
    assert np.isclose(loss0, loss1, rtol=RTOL, atol=0), (loss0, loss1)
    assert g0.keys() == g1.keys()
    for n in g0:
        np.testing.assert_allclose(g1[n], g0[n], rtol=RTOL, atol=atol_scale * max(1.0, float(np.abs(g0[n]).max())),
                                   err_msg=f"gradient of {n}")
        # AdamW's first step is ~lr*g/|g|: for an entry whose gradient is ~eps a 1e-6 relative change in g
        # moves it by ~1e-7, so parameters get an absolute floor of 1e-3 of a step (lr 1e-3).
        if check_params:
            np.testing.assert_allclose(p1[n], p0[n], rtol=RTOL, atol=1e-6, err_msg=f"parameter {n} after the step")


def rewrite(art_dir: Path, **kw) -> tuple[onnx.ModelProto, list[dict]]:
    model = onnx.load(str(art_dir / "training_model.onnx"))
    result = RowSplitPass(**kw).run(model)
    check_model(result.model, "row_split test")
    return result.model, result.records


class VGGish(nn.Module):
    """conv-relu-conv-relu-pool-conv(stride 2)-leakyrelu-avgpool-conv-relu; BN-free; a Linear head."""

    def __init__(self, h: int, w: int, classes: int = 5, pool_pad: int = 0) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
            nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=pool_pad) if pool_pad else nn.MaxPool2d(2),
            nn.Conv2d(6, 6, 3, stride=2, padding=1), nn.LeakyReLU(0.1),
            nn.AvgPool2d(2),
            nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(),
        )
        with torch.no_grad():
            n = self.features(torch.zeros(1, 3, h, w)).numel()
        self.fc = nn.Linear(n, classes)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(torch.flatten(self.features(x), 1))


class ResNetish(nn.Module):
    """conv-bn-relu stem, maxpool, one basic residual block and a stride-2 block with a 1x1 downsample."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 5, stride=2, padding=2, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        self.b1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.b2 = nn.Sequential(nn.Conv2d(8, 12, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(12), nn.ReLU(),
                                nn.Conv2d(12, 12, 3, padding=1, bias=False), nn.BatchNorm2d(12))
        self.down = nn.Sequential(nn.Conv2d(8, 12, 1, stride=2, bias=False), nn.BatchNorm2d(12))
        self.fc = nn.Linear(12, classes)

    def forward(self, x):  # noqa: ANN001, ANN201
        x = self.stem(x)
        x = torch.relu(self.b1(x) + x)
        x = torch.relu(self.b2(x) + self.down(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


@pytest.fixture(scope="module")
def vggish(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    torch.manual_seed(0)
    shape = dict(batch=2, in_ch=3, height=37, width=20, classes=5)   # odd height
    d = build_artifacts(VGGish(37, 20), tmp_path_factory.mktemp("vggish"), batch=2, in_ch=3, height=37, width=20)
    return d, shape


@pytest.fixture(scope="module")
def resnetish(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    torch.manual_seed(0)
    shape = dict(batch=2, in_ch=3, height=45, width=24, classes=5)
    d = build_artifacts(ResNetish(), tmp_path_factory.mktemp("resnetish"), batch=2, in_ch=3, height=45, width=24)
    return d, shape


class Strided(nn.Module):
    """BN-free: 7x7/2 conv (real top padding reaches past block 1), padded 3x3/2 max-pool, avg-pool that
    excludes its padding, 1x1/2 conv (rows no output reads), dilated conv; 9 output rows for R up to 8."""

    def __init__(self, h: int, w: int, classes: int = 5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 7, stride=2, padding=3), nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
            nn.Conv2d(4, 6, 3, padding=1), nn.LeakyReLU(0.2),
            nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
            nn.Conv2d(6, 6, 1, stride=2), nn.ReLU(),
            nn.Conv2d(6, 8, 3, padding=2, dilation=2), nn.ReLU(),
        )
        with torch.no_grad():
            n = self.features(torch.zeros(1, 3, h, w)).numel()
        self.fc = nn.Linear(n, classes)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(torch.flatten(self.features(x), 1))


@pytest.fixture(scope="module")
def strided(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    torch.manual_seed(0)
    shape = dict(batch=2, in_ch=3, height=67, width=16, classes=5)
    d = build_artifacts(Strided(67, 16), tmp_path_factory.mktemp("strided"), batch=2, in_ch=3, height=67, width=16)
    return d, shape


# ------------------------------------------------------------------------------------------------ tests

@pytest.mark.parametrize("variant", ["overl", "2ps"])
@pytest.mark.parametrize("rows,split_forward", [(2, False), (3, True), (5, False), (8, False), (8, True)])
def test_strided_bn_free_exact(strided, variant: str, rows: int, split_forward: bool) -> None:
    d, shape = strided
    model, records = rewrite(d, rows=rows, variant=variant, checkpoints=1, split_forward=split_forward)
    assert len(records) == 1 and records[0]["segments"][0]["rows"] == rows
    assert records[0]["segments"][0]["forward_split"] == split_forward
    assert records[0]["segments"][0]["output_rows"] == 9
    assert_same_step(d, model, **shape)


@pytest.mark.parametrize("variant", ["overl", "2ps"])
@pytest.mark.parametrize("rows,checkpoints", [(2, 1), (4, 1), (3, 2), (2, "auto"), (4, 3)])
def test_vggish_odd_height_exact(vggish, variant: str, rows: int, checkpoints) -> None:  # noqa: ANN001
    d, shape = vggish
    model, records = rewrite(d, rows=rows, variant=variant, checkpoints=checkpoints)
    (rec,) = records
    assert len(rec["nodes"]) == 10       # the whole BN-free feature stack is one chain
    if checkpoints != "auto":
        assert len(rec["checkpoints"]) == checkpoints
    assert_same_step(d, model, **shape)


@pytest.mark.parametrize("variant,order", [("overl", "priority"), ("2ps", "priority"), ("2ps", "default")])
def test_resnetish_bn_boundary_exact(resnetish, variant: str, order: str) -> None:
    d, shape = resnetish
    model, records = rewrite(d, rows=3, variant=variant)
    # BatchNorm (whole-tensor statistics) and residual Adds end chains: BN-output -> ReLU -> Conv remain, and
    # lone Convs (no stash dropped; their ConvGrad's im2col workspace shrinks R-fold).
    kinds = [[n.split("/")[-1] for n in r["nodes"]] for r in records]
    assert ["Relu", "Conv"] in kinds and all(k in (["Relu", "Conv"], ["Conv"]) for k in kinds), kinds
    assert not any("BatchNorm" in n for r in records for n in r["nodes"])
    assert_same_step(d, model, execution_order=order, **shape)


def _two_accumulated_steps(art_dir: Path, model: onnx.ModelProto, x: np.ndarray, labels: np.ndarray,
                           order: str) -> dict[str, np.ndarray]:
    """Gradients after two train_steps without a reset in between (ORT's gradient accumulation)."""
    from onnxruntime.training.api import CheckpointState, Module

    from onnxcomp.runtime.session import session_options

    path = art_dir / f"rows_acc_{id(model)}.onnx"
    onnx.save(model, str(path))
    state = CheckpointState.load_checkpoint(str(art_dir / "checkpoint"))
    module = Module(str(path), state, None, device="cpu", session_options=session_options(execution_order=order))
    module.train()
    module.lazy_reset_grad()
    module(x, labels)
    module(x[::-1].copy(), labels[::-1].copy())
    path.unlink()
    return {n: np.array(p.grad) for n, p in state.parameters if p.requires_grad}


@pytest.mark.parametrize("options", [{"variant": "2ps", "split_forward": True},
                                     {"variant": "overl", "accumulate_in_place": False}])
def test_gradient_accumulation_across_steps(vggish, options: dict) -> None:
    """Blocks accumulate straight into the optimizer's gradient buffers: the first block honours
    lazy_reset_grad, the others add; two steps without a reset must sum like the original graph."""
    d, shape = vggish
    rng = np.random.default_rng(3)
    x = rng.standard_normal((shape["batch"], 3, shape["height"], shape["width"])).astype(np.float32)
    labels = rng.integers(0, shape["classes"], size=shape["batch"]).astype(np.int64)
    model, records = rewrite(d, rows=3, checkpoints=2, **options)
    assert all(s["forward_split"] == options.get("split_forward", False) for s in records[0]["segments"])
    in_place = any(n.op_type == "InPlaceAccumulatorV2" and n.name.startswith("onnxcomp_rows") for n in model.graph.node)
    assert in_place == options.get("accumulate_in_place", True)
    g0 = _two_accumulated_steps(d, onnx.load(str(d / "training_model.onnx")), x, labels, "priority")
    g1 = _two_accumulated_steps(d, model, x, labels, "default")
    for n in g0:
        np.testing.assert_allclose(g1[n], g0[n], rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(g0[n]).max())),
                                   err_msg=n)


def test_intermediate_stashes_dropped(vggish) -> None:  # noqa: ANN001
    from onnxcomp.analysis import analyze_model

    d, _ = vggish
    base = onnx.load(str(d / "training_model.onnx"))
    model, records = rewrite(d, rows=4, variant="overl", checkpoints=1)
    before = {s.name for s in analyze_model(base).stashed}
    after = {s.name for s in analyze_model(model).stashed}
    chain_internal = {n for n in before if n.startswith("/features/") and n != "input"}
    assert chain_internal, before
    assert not (after & chain_internal), after & chain_internal     # only the chain input is kept
    assert predicted_peak(model) < predicted_peak(base)
    # the MaxPool no longer computes indices nobody reads
    assert all(len(n.output) == 1 for n in model.graph.node
               if n.op_type == "MaxPool" and not n.name.startswith("onnxcomp_rows"))


def test_rows_auto_picks_smallest_fitting_r(vggish, monkeypatch) -> None:  # noqa: ANN001
    d, shape = vggish
    base = onnx.load(str(d / "training_model.onnx"))
    # The R choice on the live curve alone: this 2-image net's maps are a few KiB, so the heap term of the nodes
    # each row block adds (planner/heap_term.py) outweighs anything a row split saves; it is checked below.
    from onnxcomp.planner import heap_term

    monkeypatch.setattr(heap_term, "COEFFICIENTS", {})
    one = RowSplitPass(rows=1, checkpoints=1).run(base)
    budget = predicted_peak(one.model) - 1      # R=1 (plain recompute) just misses it
    result = RowSplitPass(rows="auto", budget_bytes=budget, checkpoints=1).run(base)
    auto = result.records[0]["auto"]
    assert auto["chosen_rows"] > 1 and auto["fits"] and auto["predicted_peak_bytes"] <= budget
    assert all(t["predicted_peak_bytes"] > budget for t in auto["tried"][:-1])
    check_model(result.model, "auto")
    assert_same_step(d, result.model, **shape)
    roomy = RowSplitPass(rows="auto", budget_bytes=1 << 40).run(base)
    assert roomy.records[0]["auto"]["chosen_rows"] == 1
    # With the heap term, the peak rows auto checks against the budget is the live peak plus the term.
    monkeypatch.undo()
    roomy = RowSplitPass(rows="auto", budget_bytes=1 << 40).run(base)
    rec = roomy.records[0]["auto"]
    assert rec["predicted_peak_bytes"] == predicted_peak(roomy.model) + heap_term.graph_heap_term(roomy.model)
    with pytest.raises(OnnxcompError, match="no row count fits"):
        RowSplitPass(rows="auto", budget_bytes=budget, checkpoints=1).run(base)


def test_bad_options() -> None:
    for kw in ({"rows": 0}, {"rows": "x"}, {"variant": "tiles"}, {"checkpoints": 0}, {"rows": "auto"},
               {"rows": 2, "budget_bytes": -1}):
        with pytest.raises(OnnxcompError):
            RowSplitPass(**kw)
    assert RowSplitPass(rows="4", checkpoints="2").rows == 4


def test_inference_graph_rejected(vggish) -> None:  # noqa: ANN001
    d, _ = vggish
    fwd = onnx.load(str(d / "forward.onnx"))
    with pytest.raises(OnnxcompError):
        RowSplitPass().run(fwd)


# ------------------------------------------------------------------------------------------------ slow

class VGG16Conv(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        from models.architectures import VGG

        self.features = VGG(num_classes=classes).features
        self.fc = nn.Linear(512, classes)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(torch.mean(self.features(x), dim=(2, 3)))


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["overl", "2ps"])
def test_vgg16_conv_stack_exact(tmp_path: Path, variant: str) -> None:
    torch.manual_seed(0)
    d = build_artifacts(VGG16Conv(), tmp_path / "vgg", batch=2, in_ch=3, height=96, width=64)
    for rows, ck in ((3, "auto"), (8, 2)):
        model, records = rewrite(d, rows=rows, variant=variant, checkpoints=ck)
        assert len(records[0]["nodes"]) == 31
        assert_same_step(d, model, batch=2, in_ch=3, height=96, width=64, classes=10)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["overl", "2ps"])
def test_resnet18_exact(tmp_path: Path, variant: str) -> None:
    from models.zoo import build_model

    torch.manual_seed(0)
    d = build_artifacts(build_model("resnet18", 10), tmp_path / "r18", batch=2, in_ch=3, height=96, width=64)
    model, records = rewrite(d, rows=4, variant=variant)
    assert len(records) >= 8
    # BatchNorm's bias gradient sums dY over 2x48x32 positions whose terms cancel (0.0018 from terms ~0.05):
    # reassociating the row-split input gradient moves such an entry by ~3e-7, i.e. float32 rounding of its
    # terms, so the absolute floor here is 1e-5 of the tensor's largest entry. Parameters after AdamW's first
    # step (~lr*g/(|g|+eps)) are not compared: for entries with |g| ~ eps that rounding is amplified ~1e5-fold.
    assert_same_step(d, model, batch=2, in_ch=3, height=96, width=64, classes=10, atol_scale=1e-5,
                     check_params=False)


@pytest.mark.slow
@pytest.mark.parametrize("order", ["priority", "default"])
def test_measured_peak_drops_under_both_orders(tmp_path: Path, order: str) -> None:
    """Only one block's intermediates live at a time, whatever ORT's execution order: measured, not assumed."""
    from onnxcomp.passes import EagerAccumulationPass
    from onnxcomp.runtime.measure import measure
    from onnxcomp.runtime.session import RuntimeSettings

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(16, 5))
    d = build_artifacts(net, tmp_path / "m", batch=2, in_ch=3, height=256, width=256)
    base = onnx.load(str(d / "training_model.onnx"))
    onnx.save(EagerAccumulationPass().run(base).model, str(d / "eager.onnx"))
    rows = RowSplitPass(rows=8, variant="2ps", checkpoints=1).run(base).model
    onnx.save(EagerAccumulationPass().run(rows).model, str(d / "rows.onnx"))
    settings = RuntimeSettings(execution_order=order)
    p0 = measure(d, model="eager.onnx", steps=2, settings=settings).peak_bytes
    p1 = measure(d, model="rows.onnx", steps=2, settings=settings).peak_bytes
    assert p1 < 0.6 * p0, (p0, p1)


def test_transform_plumbing(vggish, monkeypatch: pytest.MonkeyPatch) -> None:
    """Options reach the pass by keyword through onnxcomp.transform (policy 'rows' as the lead wires it)."""
    from onnxcomp import passes, transform
    from onnxcomp.passes import EagerAccumulationPass

    if "rows" not in passes.POLICIES:
        monkeypatch.setitem(passes.POLICIES, "rows", [RowSplitPass, EagerAccumulationPass])
        monkeypatch.setitem(transform.POLICIES, "rows", [RowSplitPass, EagerAccumulationPass])
    d, shape = vggish
    base = onnx.load(str(d / "training_model.onnx"))
    res = transform.transform_model(base, "rows", rows=3, variant="2ps", checkpoints=2, budget_bytes=None)
    (rec,) = res.records
    assert rec["variant"] == "2ps" and rec["rows"] == 3 and len(rec["checkpoints"]) == 2
    assert res.after["stashed_bytes"] < res.before["stashed_bytes"]
    from onnxcomp.analysis import analyze_model

    stashed_before = {s.name for s in analyze_model(base).stashed}
    stashed_after = {s.name for s in analyze_model(res.model).stashed}
    assert rec["dropped_stashes"] and set(rec["dropped_stashes"]) <= stashed_before - stashed_after
    assert_same_step(d, res.model, **shape)
