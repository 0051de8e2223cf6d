"""Row split on a small hand-written training graph (onnx.parser, ORT's "<tensor>_grad" naming), and row split
composed with encodings (policies rows+lossless, rows+comet) on a BN-free net: valid graphs that train."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxcomp.analysis import analyze_model
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import POLICIES, RowSplitPass, row_split_candidates
from onnxcomp.passes.base import check_model

_CONV = 'pads=[1,1,1,1], strides=[1,1], dilations=[1,1], group=1, kernel_shape=[3,3]'

# Conv -> Relu -> Conv -> squared sum: one chain of three layers whose intermediates x and y are stashed.
CHAIN = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,10,6] input, float[4,3,3,3] w1, float[5,4,3,3] w2, float loss_grad)
      => (float loss, float[4,3,3,3] w1_grad, float[5,4,3,3] w2_grad)
{{
  x = Conv <{_CONV}> (input, w1)
  y = Relu (x)
  z = Conv <{_CONV}> (y, w2)
  zz = Mul (z, z)
  loss = ReduceSum <keepdims=0> (zz)
  two = Constant <value = float {{2.0}}> ()
  g2 = Mul (loss_grad, two)
  z_grad = Mul (z, g2)
  y_grad, w2_grad, b2 = com.microsoft.ConvGrad <{_CONV}> (z_grad, y, w2)
  x_grad = com.microsoft.ReluGrad (y_grad, x)
  input_grad, w1_grad, b1 = com.microsoft.ConvGrad <{_CONV}> (x_grad, input, w1)
}}
"""


def _chain() -> onnx.ModelProto:
    model = onnx.parser.parse_model(CHAIN)
    for k, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{k}"
        if node.output[0] == "input_grad":
            node.output[0] = ""
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(names, feeds)))


@pytest.mark.parametrize("variant,rows", [("overl", 2), ("overl", 3), ("2ps", 4)])
def test_hand_chain_exact_and_stashes_dropped(variant: str, rows: int) -> None:
    model = _chain()
    result = RowSplitPass(rows=rows, variant=variant, checkpoints=1).run(model)
    (rec,) = result.records
    assert rec["nodes"] == ["Conv_0", "Relu_1", "Conv_2"] and rec["rows"] == rows
    out = result.model
    check_model(out, "row_split unit test")
    assert {"x", "y"} <= {s.name for s in analyze_model(model).stashed}
    assert not {"x", "y"} & {s.name for s in analyze_model(out).stashed}
    rng = np.random.default_rng(0)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
             for vi in model.graph.input}
    feeds["loss_grad"] = np.array(1.0, dtype=np.float32)
    base, new = _run(model, feeds), _run(out, feeds)
    assert new["loss"] == base["loss"]
    for name in ("w1_grad", "w2_grad"):
        np.testing.assert_allclose(new[name], base[name], rtol=1e-5, atol=1e-5 * float(np.abs(base[name]).max()))


def test_candidates_and_chain_selection() -> None:
    model = _chain()
    (cand,) = row_split_candidates(model, rows=(2, 5))
    assert cand.name == "Conv_0" and cand.nodes == ("Conv_0", "Relu_1", "Conv_2") and cand.output_rows == 10
    assert cand.dropped_stash_bytes == 2 * 2 * 4 * 10 * 6 * 4          # x and y, float32
    assert set(cand.predicted_peak) == {2, 5} and cand.reduction(2) is not None and not cand.exact
    assert RowSplitPass(rows=2, chains=["Conv_0"]).run(model).records
    # only_lowering keeps a chain whose split lowers the predicted peak (here: the one chain).
    assert [r["chain"] for r in RowSplitPass(rows=2, only_lowering=True).run(model).records] == ["Conv_0"]
    with pytest.raises(OnnxcompError, match="no conv chain named"):
        RowSplitPass(rows=2, chains=["Conv_9"]).run(model)


# ------------------------------------------------------------------------------ composition with encodings

@pytest.fixture(scope="module")
def vggish_art(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    torch = pytest.importorskip("torch")
    from test_row_split import VGGish, build_artifacts

    torch.manual_seed(0)
    shape = dict(batch=4, in_ch=3, height=37, width=20, classes=5)
    return build_artifacts(VGGish(37, 20), tmp_path_factory.mktemp("vggish_compose"), batch=4, in_ch=3,
                           height=37, width=20), shape


@pytest.mark.parametrize("policy", ["rows+lossless", pytest.param("rows+comet", marks=pytest.mark.slow)])
def test_rows_compose_with_encodings(vggish_art: tuple[Path, dict], policy: str) -> None:
    from test_row_split import assert_same_step

    from onnxcomp.transform import transform_model

    art, shape = vggish_art
    model = onnx.load(str(art / "training_model.onnx"))
    result = transform_model(model, policy, rows=2, min_bytes=0)
    out = result.model
    check_model(out, policy)
    kinds = {r.kind for r in result.records}
    assert "row_split" in kinds and "encoded" in kinds            # both techniques in one graph
    encoded = {r.subject for r in result.records if r.kind == "encoded"}
    chain_inputs = {r.subject for r in result.records if r.kind == "row_split"}
    assert encoded - chain_inputs                                     # stashes outside the chains encoded too
    rows_only = RowSplitPass(rows=2).run(model).model
    assert sum(s.nbytes for s in analyze_model(out).stashed) < sum(s.nbytes for s in analyze_model(rows_only).stashed)
    if policy == "rows+lossless":    # exact techniques: one step's gradients equal up to the row split's rounding
        assert_same_step(art, out, **shape)
    else:                            # lossy: it trains, the first loss (forward untouched) is the same
        from test_row_split import train_step

        rng = np.random.default_rng(1)
        x = rng.standard_normal((shape["batch"], 3, shape["height"], shape["width"])).astype(np.float32)
        labels = rng.integers(0, shape["classes"], size=shape["batch"]).astype(np.int64)
        loss0, _, _ = train_step(art, model, x, labels)
        loss1, grads, _ = train_step(art, out, x, labels)
        assert loss1 == loss0 and all(np.isfinite(g).all() for g in grads.values())
