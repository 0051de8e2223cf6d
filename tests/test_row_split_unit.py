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


# ------------------------------------------------------------------------------ the pass on onnx-ir

# Conv -> Relu -> MaxPool -> Conv with ORT's "<tensor>_grad" names and the two accumulators ORT appends (their
# flags are graph outputs): one chain of four layers; Relu's output y is also read by a second forward op in
# BRANCHED, which cuts the chain after the Relu.
_ACC_CHAIN = """
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,12,6] input, float[4,3,3,3] w1, float[5,4,3,3] w2, float[4,3,3,3] w1_buf, float[5,4,3,3] w2_buf,
       bool lazy_reset_grad, float loss_grad) => (float loss, bool w1_out, bool w2_out{extra_out})
{{
  x = Conv <{conv}> (input, w1)
  y = Relu (x){extra}
  p, idx = MaxPool <kernel_shape=[2,2], strides=[2,2]> (y)
  z = Conv <{conv}> (p, w2)
  zz = Mul (z, z)
  loss = ReduceSum <keepdims=0> (zz)
  two = Constant <value = float {{2.0}}> ()
  g2 = Mul (loss_grad, two)
  z_grad = Mul (z, g2)
  p_grad, w2_grad = com.microsoft.ConvGrad <{conv}> (z_grad, p, w2)
  y_grad = MaxPoolGrad <kernel_shape=[2,2], strides=[2,2]> (p_grad, idx)
  x_grad = com.microsoft.ReluGrad (y_grad, x)
  input_grad, w1_grad = com.microsoft.ConvGrad <{conv}> (x_grad, input, w1)
  w2_out = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_out = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}}
"""


def _acc_chain(branched: bool = False) -> onnx.ModelProto:
    text = _ACC_CHAIN.format(conv=_CONV, extra="\n  y2 = Sigmoid (y)" if branched else "",
                             extra_out=", float[2,4,12,6] y2" if branched else "")
    model = onnx.parser.parse_model(text)
    for k, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{k}"
        if node.output[0] == "input_grad":
            node.output[0] = ""
    return model


def _ir(model: onnx.ModelProto):  # noqa: ANN202
    import onnx_ir as ir

    from onnxcomp.analysis.cached import adopt_snapshot

    m = ir.serde.deserialize_model(model)
    adopt_snapshot(m, model)
    return m


def test_chains_found_by_use_def_links() -> None:
    from onnxcomp.analysis import analysis_of
    from onnxcomp.passes.row_split.chains import find_chains, sole_accumulator

    m = _ir(_acc_chain())
    (chain,), skipped = find_chains(analysis_of(m), m.graph)
    assert [lay.label for lay in chain.layers] == ["Conv_0", "Relu_1", "MaxPool_2", "Conv_3"] and not skipped
    nodes = {n.name: n for n in m.graph}
    assert [lay.grad.name for lay in chain.layers] == ["ConvGrad_12", "ReluGrad_11", "MaxPoolGrad_10", "ConvGrad_9"]
    assert chain.input is m.graph.inputs[0]
    assert sole_accumulator(nodes["ConvGrad_9"].outputs[1]) is nodes["InPlaceAccumulatorV2_13"]
    assert sole_accumulator(nodes["Conv_0"].outputs[0]) is None
    # A second forward reader of the Relu's output ends the chain there.
    m = _ir(_acc_chain(branched=True))
    chains, _ = find_chains(analysis_of(m), m.graph)
    assert [[lay.kind for lay in ch.layers] for ch in chains] == [["Conv", "Relu"], ["MaxPool", "Conv"]]


@pytest.mark.parametrize("variant", ["overl", "2ps"])
def test_pass_replaces_backward_accumulates_in_place_and_keeps_output_names(variant: str) -> None:
    import onnx_ir as ir

    from onnxcomp.passes.base import run_passes

    model = _acc_chain()
    m = _ir(model)
    log = run_passes(m, [RowSplitPass(rows=3, variant=variant, checkpoints=1)])   # ensures: checker, gates
    out = ir.serde.serialize_model(m)
    (rec,) = log.records
    assert log.modified_by == ["row_split"] and rec.kind == "row_split" and rec["rows"] == 3
    assert set(rec["dropped_stashes"]) == {"x", "idx", "p"}   # y: no backward op reads it
    names = {n.name for n in out.graph.node}
    assert not {"ConvGrad_9", "MaxPoolGrad_10", "ReluGrad_11", "ConvGrad_12", "InPlaceAccumulatorV2_13",
                "InPlaceAccumulatorV2_14"} & names
    assert [o.name for o in out.graph.output] == [o.name for o in model.graph.output]
    producer = {o: n for n in out.graph.node for o in n.output}
    ipa = [n for n in out.graph.node if n.op_type == "InPlaceAccumulatorV2"]
    assert len(ipa) == 6 and all(n.name.startswith("onnxcomp_rows/c0s0/") for n in ipa)   # 3 blocks x 2 weights
    for flag in ("w1_out", "w2_out"):
        ident = producer[flag]
        assert ident.op_type == "Identity" and producer[ident.input[0]].op_type == "InPlaceAccumulatorV2"
    (pool,) = [n for n in out.graph.node if n.name == "MaxPool_2"]
    assert list(pool.output) == ["p"]                   # its indices are no longer computed in forward
    assert not {"x", "y", "idx", "p"} & {s.name for s in analyze_model(out).stashed}
    # The recomputed forward rows (gated row slices) cannot run before backward starts.
    boundary = analyze_model(out).boundary
    clones = [k for k, n in enumerate(out.graph.node)
              if n.name.startswith("onnxcomp_rows/") and n.op_type in ("Conv", "Relu", "MaxPool", "Slice")]
    assert clones and all(boundary.is_backward(k) for k in clones)


# Conv -> Relu -> MaxPool ending the chain (as a conv stack's block does): every backward block recomputes the
# pool for its indices only.
_POOL_LAST = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,12,6] input, float[4,3,3,3] w1, float[4,3,3,3] w1_buf, bool lazy_reset_grad, float loss_grad)
      => (float loss, bool w1_out)
{{
  x = Conv <{_CONV}> (input, w1)
  y = Relu (x)
  p, idx = MaxPool <kernel_shape=[2,2], strides=[2,2]> (y)
  pp = Mul (p, p)
  loss = ReduceSum <keepdims=0> (pp)
  two = Constant <value = float {{2.0}}> ()
  g2 = Mul (loss_grad, two)
  p_grad = Mul (p, g2)
  y_grad = MaxPoolGrad <kernel_shape=[2,2], strides=[2,2]> (p_grad, idx)
  x_grad = com.microsoft.ReluGrad (y_grad, x)
  input_grad, w1_grad = com.microsoft.ConvGrad <{_CONV}> (x_grad, input, w1)
  w1_out = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}}
"""


def _pool_last() -> onnx.ModelProto:
    model = onnx.parser.parse_model(_POOL_LAST)
    for k, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{k}"
        if node.output[0] == "input_grad":
            node.output[0] = ""
    return model


@pytest.mark.parametrize("graph,variant,split_forward", [("pool_last", "overl", False), ("pool_last", "overl", True),
                                                         ("pool_last", "2ps", False), ("acc_chain", "2ps", False)])
def test_recomputed_pool_values_are_read_and_freed(graph: str, variant: str, split_forward: bool) -> None:
    """Every block recomputes the chain's MaxPool (for its indices where the pool ends the chain; in 2PS both
    outputs, one of them read). What nothing reads would stay allocated until the step ends (ORT frees a buffer
    after its last reader; analysis ``unread``): the pass makes the read output wait for it, so it is freed
    before the pool's results are used, under both orders."""
    import onnx_ir as ir

    from onnxcomp.passes.base import run_passes
    from onnxcomp.passes.default_order import dead_nodes

    m = _ir(_pool_last() if graph == "pool_last" else _acc_chain())
    run_passes(m, [RowSplitPass(rows=3, variant=variant, checkpoints=1, split_forward=split_forward)])
    assert not dead_nodes(m.graph)                     # the readers are not leaves DefaultOrderPass deletes
    out = ir.serde.serialize_model(m)
    a = analyze_model(out)
    recomputed = [n for k, n in enumerate(out.graph.node) if n.op_type == "MaxPool" and a.boundary.is_backward(k)]
    assert len(recomputed) >= 3 and all(len(n.output) == 2 for n in recomputed)
    held = {n: t.nbytes for n, t in a.tensors.items() if a.unread(n)}
    assert not [n for n, size in held.items() if size > 1], held     # at most one-element leftovers
    spans = {b.name: b for b in a.buffers()}
    for pool in recomputed:
        y, idx = pool.output
        assert spans[y].end < a.n_steps - 1 and spans[idx].end < a.n_steps - 1
        if variant == "overl":   # read for its indices only: the values are freed before the indices are read
            assert spans[y].end < min(a.tensors[idx].consumers)


def test_no_chain_is_an_honest_no_op() -> None:
    from graphs import two_conv

    from onnxcomp.analysis.cached import current_state
    from onnxcomp.passes.base import run_passes

    m = _ir(two_conv())          # not ORT's "<tensor>_grad" naming: no backward op is found, nothing to split
    before = current_state(m)
    log = run_passes(m, [RowSplitPass(rows=2)])
    assert log.modified_by == [] and not log.records and current_state(m) is before


def test_trials_leave_the_graph_alone_until_one_is_chosen() -> None:
    from onnxcomp.passes.base import run_passes

    model = _acc_chain()
    snapshot = model.SerializeToString()
    (cand,) = row_split_candidates(model, rows=(2, 3))
    assert model.SerializeToString() == snapshot and set(cand.predicted_peak) == {2, 3}
    m = _ir(model)
    log = run_passes(m, [RowSplitPass(rows="auto", budget_bytes=1 << 40)])   # R=1 fits: the first trial
    (rec,) = log.records
    assert rec["auto"]["chosen_rows"] == 1 and rec["auto"]["fits"] and len(rec["auto"]["tried"]) == 1
    assert "ConvGrad_9" not in {n.name for n in m.graph}     # the chosen trial's graph is the model's now


def test_stable_order_moves_only_what_must_move() -> None:
    from onnxcomp.passes.editor import stable_order

    assert stable_order([set(), set(), {0}]) == [0, 1, 2]
    assert stable_order([{2}, set(), set()]) == [1, 2, 0]      # node 0 waits for its producer, 2
    assert stable_order([{1}, {0}]) is None
