"""planner/ort_pattern.py on small hand-written graphs whose plan and pattern block are worked out by hand from ORT
1.19's rules (allocation_planner.cc, mem_pattern_planner.h), plus ORT itself optimising one of them."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnxcomp.planner.ort_pattern import (ALIGN, allocation_plan, ort_optimized_model, ort_static_shapes,
                                          pattern_block, predict_pattern_block)

SHAPE = [16, 64]
BYTES = 16 * 64 * 4     # 4096, a multiple of ALIGN


def _graph(nodes: list[onnx.NodeProto], value_info: list[str], extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, []),
         *[helper.make_tensor_value_info(o, TensorProto.FLOAT, SHAPE) for o in extra_outputs]],
        value_info=[helper.make_tensor_value_info(v, TensorProto.FLOAT, SHAPE) for v in value_info])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _chain(d_reads: str = "B") -> onnx.ModelProto:
    """A = X+X; B = Relu(A); C = B*B; D = C+<d_reads>; E = D*D; Y = ReduceSum(E) (graph output)."""
    return _graph([
        helper.make_node("Add", ["X", "X"], ["A"]),
        helper.make_node("Relu", ["A"], ["B"]),
        helper.make_node("Mul", ["B", "B"], ["C"]),
        helper.make_node("Add", ["C", d_reads], ["D"]),
        helper.make_node("Mul", ["D", "D"], ["E"]),
        helper.make_node("ReduceSum", ["E"], ["Y"], keepdims=0),
    ], ["A", "B", "C", "D", "E"])


def test_inplace_reuse_and_layout_of_a_small_chain():
    m = _chain()
    plan = allocation_plan(m, ort_static_shapes(m))
    # A's only reader is Relu: B computes in place. C and D find nothing freed (B lives until D). After D, C and
    # A's buffer are freed (A's last, so first on the freelist): E takes A's buffer. Y is the caller's.
    assert plan.kind == {"X": "input", "A": "alloc", "B": "inplace", "C": "alloc", "D": "alloc", "E": "reuse",
                         "Y": "output"}
    assert plan.buffer["B"] == plan.buffer["E"] == "A"
    # one interval per buffer: from its first tensor's node to the last read of any tensor sharing it
    assert (plan.start["A"], plan.end["A"]) == (0, 5)
    assert (plan.start["C"], plan.end["C"]) == (2, 3) and (plan.start["D"], plan.end["D"]) == (3, 4)
    pb = pattern_block(plan)
    assert pb.offsets == {"A": (0, BYTES), "C": (BYTES, BYTES), "D": (2 * BYTES, BYTES)}
    assert pb.size == 3 * BYTES and pb.dynamic == []


def test_a_second_reader_blocks_the_inplace_and_a_freed_buffer_takes_the_next_tensor():
    m = _chain(d_reads="A")      # D = C + A: A has two readers, Relu may not overwrite it
    plan = allocation_plan(m, ort_static_shapes(m))
    assert plan.kind["B"] == "alloc"
    assert plan.kind["D"] == "reuse" and plan.buffer["D"] == "B"   # B is dead after C = B*B
    assert plan.kind["E"] == "reuse" and plan.buffer["E"] == "A"
    pb = pattern_block(plan)
    assert pb.offsets == {"A": (0, BYTES), "B": (BYTES, BYTES), "C": (2 * BYTES, BYTES)}
    assert pb.size == 3 * BYTES


def test_a_dead_block_leaves_a_gap_that_a_later_buffer_fills():
    # A (dies at node 1) and B (lives to the end) are laid out first; once A is released, C of A's size takes
    # A's offset (the best-fitting gap), not the end of the block
    m = _graph([
        helper.make_node("Add", ["X", "X"], ["A"]),
        helper.make_node("Mul", ["A", "X"], ["B"]),
        helper.make_node("Sub", ["X", "X"], ["Cw"]),
        helper.make_node("Reshape", ["Cw", "shape"], ["C"]),
        helper.make_node("Add", ["B", "C"], ["D"]),
        helper.make_node("ReduceSum", ["D"], ["Y"], keepdims=0),
    ], ["A", "B", "Cw", "C", "D"])
    m.graph.initializer.append(helper.make_tensor("shape", TensorProto.INT64, [2], [64, 16]))
    m.graph.value_info.append(helper.make_tensor_value_info("C", TensorProto.FLOAT, [64, 16]))
    del m.graph.value_info[3]    # the [16, 64] entry for C made by _graph
    plan = allocation_plan(m, ort_static_shapes(m))
    assert plan.kind["Cw"] == "reuse" and plan.buffer["Cw"] == "A"   # same shape, freed after node 1
    assert plan.kind["C"] == "alias" and plan.buffer["C"] == "A"     # Reshape shares its input's buffer
    assert plan.kind["D"] == "alloc"      # A's buffer is live until D is computed; B too
    pb = pattern_block(plan)
    assert pb.offsets["A"] == (0, BYTES) and pb.offsets["B"] == (BYTES, BYTES)
    assert pb.offsets["D"] == (2 * BYTES, BYTES) and pb.size == 3 * BYTES


def test_tensors_without_a_static_shape_stay_outside_the_block_and_sizes_round_up():
    m = _chain()
    del m.graph.value_info[:]           # nothing declared: only X has a shape
    plan = allocation_plan(m, ort_static_shapes(m))
    pb = pattern_block(plan)
    # no shapes: no in-place (it needs equal shapes), no reuse; every tensor is allocated on its own at run time
    assert pb.size == 0 and sorted(pb.dynamic) == ["A", "B", "C", "D", "E"]
    odd = _graph([helper.make_node("Add", ["X", "X"], ["A"]),
                  helper.make_node("Slice", ["A", "s", "e"], ["S"]),
                  helper.make_node("ReduceSum", ["S"], ["Y"], keepdims=0)], ["A"])
    odd.graph.initializer.extend([helper.make_tensor("s", TensorProto.INT64, [1], [0]),
                                  helper.make_tensor("e", TensorProto.INT64, [1], [3])])
    odd.graph.value_info.append(helper.make_tensor_value_info("S", TensorProto.FLOAT, [3, 64]))
    pb = pattern_block(allocation_plan(odd, ort_static_shapes(odd)))
    assert pb.offsets["S"][1] == -(-3 * 64 * 4 // ALIGN) * ALIGN == 768


def test_ort_optimises_and_orders_the_graph_the_replay_reads(tmp_path):
    pytest.importorskip("onnxruntime")
    m = _chain()
    path = tmp_path / "chain.onnx"
    onnx.save(m, str(path))
    import onnxruntime as ort

    so = ort.SessionOptions()
    optimized = ort_optimized_model(path, so)
    assert [n.op_type for n in optimized.graph.node] == ["Add", "Relu", "Mul", "Add", "Mul", "ReduceSum"]
    assert predict_pattern_block(path, ort.SessionOptions()).size == 3 * BYTES


def test_inspect_reports_the_predicted_pattern_block(small_artifacts, capsys):
    import json

    from onnxcomp.cli import main

    assert main(["inspect", str(small_artifacts), "--json", "--ort-pattern"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = predict_pattern_block(small_artifacts / "training_model.onnx")
    assert report["ort_defaults"] == expected.to_dict() and expected.size > 0
    # the block holds the planned buffers, so it is at least the largest of them
    assert expected.size >= max(b for _, b in expected.offsets.values())
    assert main(["inspect", str(small_artifacts), "--ort-pattern", "--batch", "3"]) != 0


def test_a_reuse_chain_holds_its_offsets_through_its_dead_stretch():
    # A dies after node 1; Z (another shape) lives at nodes 2-3, while no tensor of A's buffer is alive; E then
    # reuses A's buffer. ORT releases a buffer once, after its last reader (E's): the chain is one interval, so Z
    # cannot sit in A's offsets although A and E are both dead while Z lives (measured: modelling per-tensor
    # intervals instead under-predicted P by 15-33 % on the architecture suite).
    g = helper.make_graph([
        helper.make_node("Add", ["X", "X"], ["A"]),
        helper.make_node("ReduceSum", ["A"], ["a"], keepdims=0),
        helper.make_node("Slice", ["X", "s", "e"], ["Z"]),
        helper.make_node("ReduceSum", ["Z"], ["z"], keepdims=0),
        helper.make_node("Mul", ["X", "X"], ["E"]),
        helper.make_node("ReduceSum", ["E"], ["Y"], keepdims=0),
    ], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, []) for o in ("Y", "a", "z")],
        initializer=[helper.make_tensor("s", TensorProto.INT64, [1], [0]),
                     helper.make_tensor("e", TensorProto.INT64, [1], [8])],
        value_info=[helper.make_tensor_value_info("A", TensorProto.FLOAT, SHAPE),
                    helper.make_tensor_value_info("E", TensorProto.FLOAT, SHAPE),
                    helper.make_tensor_value_info("Z", TensorProto.FLOAT, [8, 64])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    plan = allocation_plan(m, ort_static_shapes(m))
    assert plan.kind["E"] == "reuse" and plan.buffer["E"] == "A" and plan.kind["Z"] == "alloc"
    assert (plan.start["A"], plan.end["A"]) == (0, 5)
    pb = pattern_block(plan)
    assert pb.offsets == {"A": (0, BYTES), "Z": (BYTES, BYTES // 2)} and pb.size == BYTES + BYTES // 2


def test_the_offline_replay_agrees_with_ort_where_ort_rewrites_nothing(tmp_path):
    from onnxcomp.planner.ort_pattern import replay_pattern_block

    # two branches listed first-then-second; ORT's DEFAULT order walks the second first (its producer has the
    # higher index): the offline replay must order the graph as ORT does to place the same buffers
    g = helper.make_graph([
        helper.make_node("Add", ["X", "X"], ["A"]),
        helper.make_node("Relu", ["A"], ["B"]),
        helper.make_node("Mul", ["X", "X"], ["C"]),
        helper.make_node("Sigmoid", ["C"], ["D"]),
        helper.make_node("Add", ["B", "D"], ["S"]),
        helper.make_node("ReduceSum", ["S"], ["Y"], keepdims=0),
    ], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [])],
        value_info=[helper.make_tensor_value_info(v, TensorProto.FLOAT, SHAPE) for v in "ABCDS"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "branches.onnx"
    onnx.save(m, str(path))
    import onnxruntime as ort

    offline = replay_pattern_block(m)
    assert [n.output[0] for n in offline.plan.nodes][:2] == ["C", "D"]
    assert offline.offsets == predict_pattern_block(path, ort.SessionOptions()).offsets


def _with_external_weight(tmp_path):
    """_chain with D = C + W, W an initializer kept in an external data file; the graph loaded without it."""
    import numpy as np
    from onnx import numpy_helper

    m = _chain(d_reads="W")
    m.graph.initializer.append(numpy_helper.from_array(np.ones(SHAPE, np.float32), "W"))
    onnx.save(m, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    return onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)


def test_external_data_is_read_from_base_dir(tmp_path):
    from onnxcomp.planner.ort_pattern import pattern_block_or_replay, predict_pattern_block_of

    m = _with_external_weight(tmp_path)
    block = predict_pattern_block_of(m, base_dir=tmp_path)
    assert block.source == "ort" and block.size == predict_pattern_block(tmp_path / "m.onnx").size
    assert pattern_block_or_replay(m, base_dir=tmp_path).fallback_reason is None


def test_a_fallback_to_the_replay_says_why(tmp_path, caplog):
    """Without base_dir ORT cannot read the external weight: the replay's figure comes back marked, with the
    reason logged and in ``to_dict`` (the JSON of `inspect --ort-pattern`, the plan's rounds, the pool gate)."""
    from onnxcomp.planner.ort_pattern import pattern_block_or_replay, replay_pattern_block

    m = _with_external_weight(tmp_path)
    with caplog.at_level("WARNING", logger="onnxcomp.planner.ort_pattern"):
        block = pattern_block_or_replay(m, purpose="a test")
    assert block.source == "replay" and "external data" in block.fallback_reason
    assert block.size == replay_pattern_block(m).size
    assert block.to_dict()["fallback_reason"] == block.fallback_reason
    assert "a test: ORT could not set the graph up" in caplog.text


def _cast_chain(to: int, op: str = "Cast") -> onnx.ModelProto:
    """A = X+X; B = <op>(A) (Cast to ``to``, or Clip); Y = ReduceSum(B): A's only reader is B."""
    node = (helper.make_node("Cast", ["A"], ["B"], to=to) if op == "Cast"
            else helper.make_node(op, ["A"], ["B"]))
    g = helper.make_graph(
        [helper.make_node("Add", ["X", "X"], ["A"]), node, helper.make_node("ReduceSum", ["B"], ["Y"], keepdims=0)],
        "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("Y", to if op == "Cast" else TensorProto.FLOAT, [])],
        value_info=[helper.make_tensor_value_info("A", TensorProto.FLOAT, SHAPE),
                    helper.make_tensor_value_info("B", to if op == "Cast" else TensorProto.FLOAT, SHAPE)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("to,op,inplace", [(TensorProto.INT32, "Cast", True), (TensorProto.INT64, "Cast", False),
                                           (TensorProto.FLOAT, "Clip", True)])
def test_cast_and_clip_compute_in_place_when_the_sizes_match(tmp_path, to, op, inplace):
    """ORT's Cast (cast_op.cc) and Clip kernels are MayInplace(0, 0): a Cast between types of one element size
    writes over its input when that is the input's last use (measured: one 256 KiB buffer in ORT's pattern for
    Add → Cast-to-int32 / Clip, two for Add → Neg). Without the Cast entry lossy densenet_s's block read +27 %: its
    bool → uint8 sign-bit Casts were given buffers of their own. float → int64 doubles the size: no in place."""
    m = _cast_chain(to, op)
    plan = allocation_plan(m, ort_static_shapes(m))
    assert plan.kind["B"] == ("inplace" if inplace else "alloc")
    pb = pattern_block(plan)
    assert pb.size == (BYTES if inplace else BYTES + 2 * BYTES)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    assert predict_pattern_block(path).size == pb.size         # ORT's optimised graph keeps both nodes


def test_every_planned_size_rounds_up_to_orts_256_byte_alloc_alignment():
    """ORT rounds each planned size up to kAllocAlignment = 256 bytes before MemPatternPlanner lays it out: three
    16-float tensors live at once take 3 × 256 bytes, not 3 × 64. Measured on MobileNetV2's growth-mode plan: every
    codec PyOp input found in ORT's block sits at the replay's offset with 256-byte rounding and 448-3,000 B lower
    with 64; 17 of 24 graphs' P became byte-exact (docs/notes/growthmiss.md)."""
    small = [16]
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["X", "ax"], ["A"], keepdims=0),
         helper.make_node("Neg", ["A"], ["B"]),
         helper.make_node("Mul", ["A", "B"], ["C"]),
         helper.make_node("ReduceSum", ["C"], ["Y"], keepdims=0)],
        "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [])],
        [helper.make_tensor("ax", TensorProto.INT64, [1], [1])],
        value_info=[helper.make_tensor_value_info(v, TensorProto.FLOAT, small) for v in "ABC"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    plan = allocation_plan(m, ort_static_shapes(m))
    assert [plan.kind[v] for v in "ABC"] == ["alloc", "alloc", "alloc"]     # A and B are read by C: all three live
    pb = pattern_block(plan)
    assert ALIGN == 256
    assert {v: pb.offsets[v] for v in "ABC"} == {"A": (0, 256), "B": (256, 256), "C": (512, 256)}
    assert pb.size == 768


def test_a_buffer_allocated_for_an_unread_output_is_never_given_to_a_later_tensor():
    """U = Neg(A) is read by nobody: its buffer lives to the step's end (the layout already held it so) and is not
    freed for reuse, so B gets a buffer of its own. Before, U's buffer went back to the free list right after Neg
    and B took it (P 8 KiB); measured on MobileNetV2's growth-mode plan and lossy mobilenet_v1_s (their recomputed
    BatchNorms' saved mean / inv-std are such outputs), P is byte-exact only with the rule
    (docs/notes/growthmiss.md)."""
    m = _graph([helper.make_node("Add", ["X", "X"], ["A"]),
                helper.make_node("Neg", ["A"], ["U"]),
                helper.make_node("Mul", ["A", "A"], ["B"]),
                helper.make_node("ReduceSum", ["B"], ["Y"], keepdims=0)], ["A", "U", "B"])
    plan = allocation_plan(m, ort_static_shapes(m))
    assert [plan.kind[v] for v in "AUB"] == ["alloc", "alloc", "alloc"]
    assert plan.end["U"] == len(plan.nodes)
    pb = pattern_block(plan)
    assert {v: pb.offsets[v][0] for v in "AUB"} == {"A": 0, "U": BYTES, "B": 2 * BYTES}
    assert pb.size == 3 * BYTES
