"""Are two ONNX graphs the same computation, node for node? Names may differ; op sequence and wiring may not.

usage: python tools/compare_graphs.py A.onnx B.onnx [A2.onnx B2.onnx ...]

Every tensor is renamed by where it comes from: a graph input by its position, an initializer by its dtype,
dims and values, a node output by (node index, output slot); trailing empty optional slots are dropped
(onnx-ir does not write them). Then the node lists must match exactly (op type,
domain, attributes, renamed inputs and outputs) and so must the graph outputs. Prints one line per pair,
exits 1 if any pair differs.
"""
from __future__ import annotations

import hashlib
import sys

import onnx
import onnx.numpy_helper


def canonical(model: onnx.ModelProto) -> tuple[list[tuple], list[str]]:
    g = model.graph
    name: dict[str, str] = {"": ""}
    for k, i in enumerate(g.input):
        name[i.name] = f"in{k}"
    for t in g.initializer:
        # By value: the same tensor may be stored as raw_data or as typed fields (onnx-ir writes raw_data).
        digest = hashlib.sha1(onnx.numpy_helper.to_array(t).tobytes()).hexdigest()[:12]
        name[t.name] = f"init:{t.data_type}:{list(t.dims)}:{digest}"
    nodes = []
    for k, n in enumerate(g.node):
        for s, o in enumerate(n.output):
            if o:
                name[o] = f"n{k}.{s}"
        attrs = sorted((a.name, str(onnx.helper.get_attribute_value(a))) for a in n.attribute)
        inputs = [name.get(i, f"?{i}") for i in n.input]
        outputs = [name[o] if o else "" for o in n.output]
        while inputs and not inputs[-1]:     # a trailing unused optional slot is the same as no slot
            inputs.pop()
        while outputs and not outputs[-1]:
            outputs.pop()
        nodes.append((n.op_type, n.domain, tuple(attrs), tuple(inputs), tuple(outputs)))
    return nodes, [name.get(o.name, f"?{o.name}") for o in g.output]


def compare(a_path: str, b_path: str) -> str | None:
    a_nodes, a_out = canonical(onnx.load(a_path, load_external_data=False))
    b_nodes, b_out = canonical(onnx.load(b_path, load_external_data=False))
    if len(a_nodes) != len(b_nodes):
        return f"{len(a_nodes)} vs {len(b_nodes)} nodes"
    for k, (x, y) in enumerate(zip(a_nodes, b_nodes)):
        if x != y:
            return f"node {k} differs: {x[:2]} {x[3]} vs {y[:2]} {y[3]}"
    if a_out != b_out:
        return "graph outputs differ"
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    bad = 0
    for a, b in zip(argv[::2], argv[1::2]):
        problem = compare(a, b)
        print(f"{'same' if problem is None else 'DIFFERENT'}  {a}  {b}" + (f"  ({problem})" if problem else ""))
        bad += problem is not None
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
