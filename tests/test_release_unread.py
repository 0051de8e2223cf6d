"""IrGraphEditor.release_unread on a small hand-written graph: an output no node reads (ORT would hold it to the
end of the run) gets a reader that runs right behind its producer under both execution orders, is not a dead
leaf, and changes no value."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from onnxcomp.analysis.execution_order import in_run_order
from onnxcomp.passes.default_order import dead_nodes
from onnxcomp.passes.editor import IrGraphEditor

FLOAT, INT64 = ir.DataType.FLOAT, ir.DataType.INT64


def _pool_graph(release: bool) -> tuple[ir.Model, dict[str, ir.Value]]:
    """x -> MaxPool -> (y, idx); out = Cast(idx) + Neg(x pooled again), y read by nothing; a 1-element
    unread output (ReduceMax keepdims) and a kept one beside."""
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape([1, 2, 4, 4]))
    graph = ir.Graph([x], [], nodes=[], name="g", opset_imports={"": 17})
    ed = IrGraphEditor(graph, prefix="t")
    pool = ed.node("MaxPool", [x], [("y", FLOAT, [1, 2, 2, 2]), ("idx", INT64, [1, 2, 2, 2])], name="pool",
                   kernel_shape=[2, 2], strides=[2, 2])
    y, idx = pool.outputs
    out = ed.op("Cast", [idx], "", FLOAT, [1, 2, 2, 2], out="out", to=FLOAT)
    tiny = ed.op("ReduceMax", [x], "", FLOAT, [1, 1, 1, 1], out="tiny", keepdims=1)
    kept = ed.op("Neg", [x], "", FLOAT, [1, 2, 4, 4], out="kept")
    values = {"y": y, "idx": idx, "out": out, "tiny": tiny, "kept": kept}
    if release:
        values["released"] = ed.release_unread(keep={kept})   # type: ignore[assignment]
    graph.extend(ed.nodes)
    graph.outputs.append(out)
    return ir.Model(graph, ir_version=8), values


def test_unread_output_is_read_right_behind_its_producer() -> None:
    model, v = _pool_graph(release=True)
    assert v["released"] == [v["y"]]                       # tiny (1 element) and kept (to be read) left alone
    assert not v["tiny"].uses() and not v["kept"].uses()
    nodes = list(model.graph)
    at = {n: k for k, n in enumerate(nodes)}
    pool = v["y"].producer()
    (cast,) = [n for n in nodes if n.op_type == "Cast" and n.outputs[0] is v["out"]]
    # The indices' reader now reads a view of them gated on y: y's readers run before it, behind the pool.
    assert cast.inputs[0] is not v["idx"] and cast.inputs[0].producer().op_type == "Reshape"
    y_readers = [u.node for u in v["y"].uses()]
    assert y_readers and all(at[pool] < at[r] < at[cast] for r in y_readers)
    # Not a dead leaf: DefaultOrderPass keeps it (it would delete a reader read by nothing); what it deletes here
    # is the test's own unread nodes.
    assert {n.outputs[0].name for n in dead_nodes(model.graph)} == {"tiny", "kept"}
    # ORT's DEFAULT order too runs y's last reader before the indices' reader.
    proto = ir.serde.serialize_model(model)
    ordered = [n for n in in_run_order(proto, "default").graph.node]
    pos = {o: k for k, n in enumerate(ordered) for o in n.output}
    last_y_read = max(k for k, n in enumerate(ordered) if "y" in n.input or
                      any(i in n.input for i in (r.outputs[0].name for r in y_readers)))
    assert last_y_read < pos["out"]


def test_released_graph_computes_the_same() -> None:
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    outs = []
    for release in (False, True):
        model, _ = _pool_graph(release)
        proto = ir.serde.serialize_model(model)
        onnx.checker.check_model(proto)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        outs.append(sess.run(["out"], {"x": x})[0])
    np.testing.assert_array_equal(outs[0], outs[1])
