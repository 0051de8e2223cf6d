"""The graph editor every pass makes new nodes with: names, constants, typed outputs, and the ordering gate.

A pass decides *where* its new nodes go in the node list (that is its job: ORT's PRIORITY order runs the
lowest ready index first); the editor decides how they are named and typed, and how a node is made to wait
for a tensor. There is one waiting idiom, ``gate(value, after=...)``:

    zero = Cast(Less(t, t), int64)        t: one element of each tensor in ``after``
    gated = Reshape(value, shape + zero)  a zero-copy view of ``value``

``Less(t, t)`` is false for every value, NaN and ±Inf included, so the shape is always exact; but ORT can
neither constant-fold it nor run a reader of ``gated`` before every ``after`` tensor exists, under either
execution order (tests/test_execution_order.py checks both). Where a node needs the wait as an offset
rather than a view (a Slice start), ``zero_after`` hands out the zero itself.
"""
from __future__ import annotations

import heapq
from typing import Any

import numpy as np

import onnx_ir as ir


from ..errors import OnnxcompError

# Shared int64 constants of the one-element slices that read one element of a tensor.
TRIGGER_CONSTANTS = (("onnxcomp_trigger_start", [0]), ("onnxcomp_trigger_end", [1]),
                     ("onnxcomp_trigger_flat_shape", [-1]))


def unique_name(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def const_array(v: ir.Value | None) -> np.ndarray | None:
    """The values of a constant (initializer or Constant node), else None."""
    if v is None:
        return None
    tensor = v.const_value
    p = v.producer()
    if tensor is None and p is not None and p.op_type == "Constant" and "value" in p.attributes:
        tensor = p.attributes["value"].value
    return None if tensor is None else tensor.numpy()


def static_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    """``value``'s shape as ints, or None when it has none or a symbolic dimension."""
    if value is None or value.shape is None or not value.shape.is_static():
        return None
    return tuple(int(d) for d in value.shape)


def take_over(old: ir.Value, new: ir.Value) -> None:
    """``new`` replaces ``old`` everywhere (graph outputs too) and takes its name and type."""
    name = old.name
    new.type, new.shape = old.type, old.shape
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    old.name = None
    new.name = name


def ir_taken_names(graph: ir.Graph) -> set[str]:
    """Every value and node name in use in the onnx-ir ``graph`` (what unique_name must avoid)."""
    names = {n.name for n in graph if n.name} | {v.name for n in graph for v in n.outputs if v.name}
    return names | {v.name for v in graph.inputs if v.name} | set(graph.initializers)


class IrGraphEditor:
    """The graph editor on onnx-ir: names new values and nodes, types outputs, adds constants and builds the
    one ordering gate, ``gate(value, after=...)``. Nodes are collected in ``.nodes`` (the pass places them
    with ``graph.insert_after``/``insert_before``); constants go straight into the graph's initializers.
"""

    def __init__(self, graph: ir.Graph, taken: set[str] | None = None, prefix: str = "onnxcomp",
                 sep: str = "_") -> None:
        self.graph = graph
        self.taken = taken if taken is not None else ir_taken_names(graph)
        self.prefix, self.sep = prefix, sep
        self.nodes: list[ir.Node] = []

    # -- names and types ---------------------------------------------------------------------------------
    def name(self, base: str) -> str:
        return unique_name(f"{self.prefix}{self.sep}{base}", self.taken)

    def node(self, op: str, inputs: list[ir.Value], outputs: list[tuple[str, ir.DataType, list[int] | None]], *,
             name: str, domain: str = "", **attrs: Any) -> ir.Node:
        """A node whose outputs are named and typed as given: (name, element type, shape or None)."""
        node = ir.Node(domain, op, inputs, ir.convenience.convert_attributes(attrs), num_outputs=len(outputs),
                       name=name)
        for value, (out, elem, shape) in zip(node.outputs, outputs):
            value.name = out
            if not out:       # an absent optional output ("": no name, no type)
                continue
            value.type = ir.TensorType(elem)
            if shape is not None:
                value.shape = ir.Shape(shape)
        self.nodes.append(node)
        return node

    def op(self, op: str, inputs: list[ir.Value], base: str, elem: ir.DataType, shape: list[int] | None,
           *, out: str | None = None, domain: str = "", **attrs: Any) -> ir.Value:
        """One node with one typed output (named ``out`` exactly, else ``<prefix>_<base>``)."""
        name = unique_name(out, self.taken) if out else self.name(base)
        return self.node(op, inputs, [(name, elem, shape)], name=unique_name(f"{name}__{op.lower()}", self.taken),
                         domain=domain, **attrs).outputs[0]

    # -- constants ---------------------------------------------------------------------------------------
    def take_over_as_declared(self, old: ir.Value, new: ir.Value) -> list[ir.Node]:
        """``new`` (an op's output, declared with the shape ORT infers for it) replaces ``old``. Where ``old`` is
        declared with another shape of the same elements — the reuse pass's lifted declarations (passes/
        reuse_signature.py: a ConvGrad dX declared ``[N, C, H, W, 1, ...]``) — the readers get a zero-copy
        ``Reshape`` view of ``new`` under ``old``'s name and declaration: a Conv output declared lifted made ORT log
        "Error merging shape info ... Falling back to lenient merge" (docs/notes/setupcount.md §3,
        docs/notes/headroom.md). Returns the nodes made (to insert after ``new``'s producer)."""
        declared, own = static_shape(old), static_shape(new)
        if declared is None or own is None or declared == own or int(np.prod(declared)) != int(np.prod(own)):
            take_over(old, new)
            return []
        start = len(self.nodes)
        shape = self.shared_const("onnxcomp_shape_" + "x".join(str(d) for d in declared), list(declared))
        take_over(old, self.op("Reshape", [new, shape], "declared", new.dtype, list(declared)))
        return self.nodes[start:]

    def shared_const(self, name: str, values: list[int], dims: list[int] | None = None) -> ir.Value:
        """An int64 initializer called exactly ``name``, added once however often it is asked for."""
        return self.shared_tensor(name, np.array(values, dtype=np.int64).reshape(dims if dims is not None
                                                                                   else [len(values)]))

    # -- ordering ----------------------------------------------------------------------------------------
    def zero_after(self, after: ir.Value, elem: ir.DataType | None = None, base: str | None = None) -> ir.Value:
        """An int64 [1] zero that exists only once ``after`` (element type ``elem``, default its own) does:
        ``Cast(Less(t, t), int64)`` on one element ``t`` of it (cast to float first for types ORT's CPU Less
        has no kernel for: float16, bool, uint8, ...)."""
        start, end, minus_one = (self.shared_const(n, v) for n, v in TRIGGER_CONSTANTS)
        base = base or f"{self.prefix}{self.sep}gate"
        elem = elem if elem is not None else after.dtype
        if elem is None:
            raise ValueError(f"zero_after: the element type of {after.name!r} is unknown; pass it")
        flat = self.op("Reshape", [after, minus_one], "", elem, None, out=f"{base}_flat")
        one = self.op("Slice", [flat, start, end], "", elem, [1], out=f"{base}_trigger")
        # ORT 1.19's CPU Less has kernels for float, double, int32 and int64 only (no float16, bool, uint8).
        if elem not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.INT32, ir.DataType.INT64):
            one = self.op("Cast", [one], "", ir.DataType.FLOAT, [1], out=f"{base}_f32", to=ir.DataType.FLOAT)
        less = self.op("Less", [one, one], "", ir.DataType.BOOL, [1], out=f"{base}_less")
        return self.op("Cast", [less], "", ir.DataType.INT64, [1], out=f"{base}_zero", to=ir.DataType.INT64)

    def gate(self, value: ir.Value, after: ir.Value, *, shape: list[int] | None = None,
             elem: ir.DataType | None = None, after_elem: ir.DataType | None = None, name: str | None = None,
             zero: ir.Value | None = None) -> ir.Value:
        """A zero-copy view of ``value`` that no node can read before ``after`` exists:
        ``Reshape(value, shape + zero_after(after))``. ``shape``/``elem``/``after_elem`` default to what the
        values declare (the analysis knows them when the graph does not; a shape known to neither is read
        at run time, ``Shape(value)``); ``zero``: one already made for ``after``; ``name``: the view's name
        (default ``<prefix>_gated``)."""
        if shape is None and value.shape is not None and value.shape.is_static():
            shape = [int(d) for d in value.shape]
        elem = elem if elem is not None else value.dtype
        zero = zero or self.zero_after(after, after_elem)
        if shape is None:   # unknown statically: the view reads Shape(value) (not folded when dynamic)
            dims = self.op("Shape", [value], "shape_of", ir.DataType.INT64, None)
        else:
            dims = self.shared_const(f"onnxcomp_shape_{'x'.join(map(str, shape)) or 'scalar'}", shape, [len(shape)])
        view_shape = self.op("Add", [dims, zero], "gate_shape", ir.DataType.INT64,
                             [len(shape)] if shape is not None else None)
        return self.op("Reshape", [value, view_shape], "gated", elem, shape, out=name)

    def initializer(self, name: str, array: np.ndarray) -> ir.Value:
        """A new initializer holding ``array``, called ``name`` (made unique: never an existing one)."""
        name = unique_name(name, self.taken)
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         shape=ir.Shape(array.shape), const_value=ir.tensor(array, name=name))
        self.graph.register_initializer(value)
        return value

    def const(self, base: str, elem: ir.DataType, values: list[int] | list[float],
              dims: list[int] | None = None) -> ir.Value:
        """A new initializer ``<prefix>_<base>`` of element type ``elem`` (1-D unless ``dims``)."""
        array = np.array(values, dtype=elem.numpy()).reshape(dims if dims is not None else [len(values)])
        return self.initializer(f"{self.prefix}{self.sep}{base}", array)

    def zero_after_all(self, after: list[ir.Value], elem: ir.DataType | None = None,
                       base: str | None = None) -> ir.Value:
        """An int64 [1] zero that exists only once every value in ``after`` (element type ``elem``, default
        each one's own) does: ``zero_after`` of each (in order), summed."""
        zeros = [self.zero_after(v, elem, base) for v in after]
        total = zeros[0]
        for z in zeros[1:]:
            total = self.op("Add", [total, z], "gate_sum", ir.DataType.INT64, [1])
        return total

    # -- releases ------------------------------------------------------------------------------------------
    def release_unread(self, keep: set[ir.Value] | frozenset[ir.Value] = frozenset()) -> list[ir.Value]:
        """Make the outputs of this editor's nodes that no node reads be read, and return them. ORT releases a
        buffer after its last reader and makes its releases from readers only (onnxruntime 1.19,
        allocation_planner.cc ``GenerateDeallocationPlan``): an output nothing reads -- a recomputed MaxPool's
        values where only its indices are needed -- stays allocated until the run ends (analysis:
        ``GraphAnalysis.unread``). A reader that is itself read by nothing would not do: it is a leaf, which
        ORT's DEFAULT order runs after the whole backward pass, and DefaultOrderPass deletes it as dead. So the
        node's outputs that *are* read wait for the unread ones instead: their readers get
        ``gate(read, after=unread)`` (a zero-copy view), whose trigger is the unread outputs' last reader,
        placed right behind the node. Under either order the unread buffers are freed before the node's results
        are first used. ``keep``: values that will be read (a tensor about to take over an original's
        readers). Left alone: graph outputs, outputs written in place (``INPLACE_OPS``: views of persistent
        buffers), values of at most one element (the gate holds as much), untyped ones, and nodes none of
        whose outputs is read yet (dead, or read only through ``keep``)."""
        from ..analysis.training_graph import INPLACE_OPS

        def worth(v: ir.Value) -> bool:
            if not v.name or v.uses() or v in keep or v in self.graph.outputs or v.dtype is None:
                return False
            return v.shape is None or not v.shape.is_static() or \
                int(np.prod([int(d) for d in v.shape], dtype=np.int64)) > 1

        released: list[ir.Value] = []
        behind: dict[ir.Node, list[ir.Node]] = {}
        for node in list(self.nodes):
            if node.op_type in INPLACE_OPS:
                continue
            unread = [v for v in node.outputs if worth(v)]
            read = [v for v in node.outputs if v.uses()]
            if not unread or not read:
                continue
            made = len(self.nodes)
            zero = self.zero_after_all(unread)
            for value in read:
                readers = list(value.uses())
                gated = self.gate(value, unread[0], zero=zero, name=f"{value.name}_after_unread")
                for user, index in readers:
                    user.replace_input_with(index, gated)
            behind[node] = self.nodes[made:]
            del self.nodes[made:]
            released += unread
        if behind:
            self.nodes[:] = [n for node in self.nodes for n in (node, *behind.get(node, ()))]
        return released

    # -- copies --------------------------------------------------------------------------------------------
    def clone(self, node: ir.Node, inputs: list[ir.Value | None],
              outputs: list[tuple[str, ir.DataType, list[int] | None] | None], *, name: str) -> ir.Node:
        """A copy of ``node`` (domain, op type, attributes) reading ``inputs``, its outputs named and typed as
        given: (name, element type, shape or None), or None for an optional output left out."""
        attrs = [ir.Attr(a.name, a.type, a.value) for a in node.attributes.values()]
        copy = ir.Node(node.domain, node.op_type, inputs, attrs, overload=node.overload, num_outputs=len(outputs),
                       name=name, doc_string=node.doc_string)
        for value, spec in zip(copy.outputs, outputs):
            if spec is None:
                value.name = ""      # an absent optional output (onnx-ir leaves trailing ones out)
                continue
            value.name, value.type = spec[0], ir.TensorType(spec[1])
            if spec[2] is not None:
                value.shape = ir.Shape(spec[2])
        self.nodes.append(copy)
        return copy

    def shared_tensor(self, name: str, array: np.ndarray) -> ir.Value:
        """An initializer called exactly ``name`` holding ``array`` (any dtype and shape, a scalar too), added
        once however often it is asked for (``shared_const`` is the int64 case)."""
        existing = self.graph.initializers.get(name)
        if existing is not None:
            return existing
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         shape=ir.Shape(array.shape), const_value=ir.tensor(array, name=name))
        self.graph.register_initializer(value)
        self.taken.add(name)
        return value

    def untyped(self, op: str, inputs: list[ir.Value | None], outputs: list[str], *, name: str, domain: str = "",
                **attrs: Any) -> ir.Node:
        """A node whose outputs are named but declare no type (the graph states nothing about them; ORT
        infers them), e.g. a flattening Reshape whose length nothing needs, or a custom op whose outputs the
        caller types one by one."""
        node = ir.Node(domain, op, inputs, ir.convenience.convert_attributes(attrs), num_outputs=len(outputs),
                       name=name)
        for value, out in zip(node.outputs, outputs):
            value.name = out
        self.nodes.append(node)
        return node


# -- node order ------------------------------------------------------------------------------------------

def stable_order(deps: list[set[int]]) -> list[int] | None:
    """A topological order of nodes ``0..n-1`` (``deps[i]``: the nodes node i reads from) that keeps the
    given order wherever it is valid: the lowest ready index first. None if there is a cycle."""
    users: dict[int, list[int]] = {}
    waiting = [set(d) for d in deps]
    for i, d in enumerate(waiting):
        for p in d:
            users.setdefault(p, []).append(i)
    ready = [i for i, d in enumerate(waiting) if not d]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(i)
        for u in users.get(i, []):
            waiting[u].discard(i)
            if not waiting[u]:
                heapq.heappush(ready, u)
    return out if len(out) == len(deps) else None


def stable_toposort(nodes: list[ir.Node], what: str = "rewrite") -> list[ir.Node]:
    """``nodes`` in the order kept wherever it is valid; a node that reads a value produced later in
    ``nodes`` (e.g. an accumulator an earlier pass moved right after a node this pass replaced) moves down
    to just after its last producer. ``what`` names the pass in the internal error on a cycle."""
    index = {n: i for i, n in enumerate(nodes)}
    deps = [{index[p] for v in n.inputs if v is not None and (p := v.producer()) is not None
             and p in index and p is not n} for n in nodes]
    order = stable_order(deps)
    if order is None:
        raise OnnxcompError(f"{what} produced a cyclic graph (internal error)")
    return [nodes[i] for i in order]
