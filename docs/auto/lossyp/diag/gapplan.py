from onnxcomp.planner.ort_pattern import *
from onnxcomp.planner.ort_pattern import _itemsize, ALIAS, MAY_INPLACE
from collections import defaultdict
import numpy as np
from typing import Mapping, Sequence
def allocation_plan_gap(GAP, model: onnx.ModelProto, shapes: Mapping[str, Shape],
                    alias: Mapping[tuple[str, str], Sequence[tuple[int, int]]] = ALIAS,
                    may_inplace: Mapping[tuple[str, str], Sequence[tuple[int, int]]] = MAY_INPLACE) -> OrtPlan:
    """ORT's buffer-reuse plan of ``model`` (nodes in the order given; module docstring, items 3-4)."""
    g = model.graph
    plan = OrtPlan(list(g.node), dict(shapes))
    pre = {i.name for i in g.input} | {t.name for t in g.initializer}
    outputs = {o.name for o in g.output}
    use: dict[str, int] = defaultdict(int)
    for name in pre | outputs:
        use[name] += 1
    for node in plan.nodes:
        for name in [*node.input, *node.output]:
            if name:
                use[name] += 1
    for name in pre:
        plan.buffer[name], plan.kind[name] = name, "input"

    def same_size(a: str, b: str) -> bool:
        sa, sb = plan.shapes.get(a), plan.shapes.get(b)
        if sa is None or sb is None or sa[1] is None or sb[1] is None:
            return False
        if onnx.TensorProto.STRING in (sa[0], sb[0]) or 0 in (sa[0], sb[0]):
            return False
        return _itemsize(sa[0]) == _itemsize(sb[0]) and sa[1] == sb[1]

    def share(reused: str, value: str, kind: str) -> None:
        original = plan.buffer[reused]
        plan.buffer[value] = original
        use[original] += use[value]
        plan.kind[value] = kind

    free: list[str] = []
    freed_at = {}     # freed buffers, most recently freed first (ORT's freelist_)
    # A buffer allocated for an output nobody reads is never released for reuse: the layout holds it to the step's
    # end (below), and so does the reuse plan. Measured (docs/notes/growthmiss.md): with this rule MobileNetV2's
    # growth-mode plan (-16.0 %), lossy mobilenet_v1_s (+2.0 %) and three graphs at -0.01 % predict P to the byte,
    # nothing else moves (BatchNormInternal's recomputed saved mean / inv-std are such outputs).
    read = {x for node in plan.nodes for x in node.input if x}
    for step_i, node in enumerate(plan.nodes):
        key = (node.op_type, node.domain)
        for k, y in enumerate(node.output):
            if not y:
                continue
            plan.buffer[y] = y
            if y in outputs:
                plan.kind[y] = "output"
                continue
            src = next((node.input[i] for i, o in alias.get(key, ()) if o == k and i < len(node.input)
                        and node.input[i]), None)
            if src is not None:
                share(src, y, "alias")
                continue
            src = next((node.input[i] for i, o in may_inplace.get(key, ()) if o == k and i < len(node.input)
                        and node.input[i] and use[plan.buffer[node.input[i]]] == 1
                        and same_size(node.input[i], y)), None)
            if src is not None:
                share(src, y, "inplace")
                continue
            s = plan.shapes.get(y)
            hit = None
            if s is not None and s[1] is not None and len(s[1]) > 0:
                hit = next((j for j, b in enumerate(free) if same_size(b, y) and step_i - freed_at.get(b, step_i) <= GAP), None)
            if hit is not None:
                share(free.pop(hit), y, "reuse")
            else:
                plan.kind[y] = "alloc"
        for name in [*node.input, *node.output]:
            if name and name in plan.buffer:
                original = plan.buffer[name]
                use[original] -= 1
                if use[original] == 0 and (original in read or plan.kind.get(original) != "alloc"):
                    free.insert(0, original); freed_at[original] = step_i
    n = len(plan.nodes)
    for step, node in enumerate(plan.nodes):
        for y in node.output:
            if y and plan.kind.get(y) == "alloc":
                plan.start[y], plan.end[y] = step, n       # n: nobody reads it, it lives to the end
    last: dict[str, int] = {}
    for step, node in enumerate(plan.nodes):
        for x in node.input:
            if x and plan.kind.get(plan.buffer.get(x, "")) == "alloc":
                last[plan.buffer[x]] = step
    plan.end.update(last)
    return plan
