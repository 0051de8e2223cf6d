"""Pass: every Dropout's random draw moved to the start of the step, in its original order — exact.

After the exact transformer passes and the chunked attention forward (passes/chunk_attention.py), a long
sequence's step peak is the attention Dropout's draw: ORT's CPU kernel needs its input, output and bool mask
whole (9 bytes per score; at batch 1, T 2048, 4 heads: 144 MiB), on top of everything the forward holds by
then (GPT-tiny's last block: 20 MiB of stashes and Q, K, V). The draw cannot be split: each call of the
kernel takes one seed from ORT's process-wide generator and draws the whole mask from it, one number per
element in order, and a graph cannot read that seed. But the draw does not depend on the input's values
either (ORT's mask is ``uniform(rng) >= ratio`` per element; the chunked forward already draws it from
zeros): only on the *order* of the Dropout calls. So every forward Dropout draws at the start of the step,
when nothing else is alive, in the same order, from zeros of its input's shape; its mask is encoded to bits
at once (the ``bitmask`` codec DropoutMaskPass put there) and decoded where the forward needs it:

- a Dropout on data (residual / MLP dropout): its output becomes ``Cast(mask) · X / (1 − ratio)``, ORT's
  kernel's own formula (Eigen ``mask.cast<T>() * X / (1.0f - ratio)``), so the same floats bit for bit;
- a Dropout already drawing from zeros (the chunked attention): the chunks read the decoded mask, and the
  one-element timing reads of its (zero) output read the decoder's trigger instead.

Conditions (checked; the pass does nothing otherwise): the Dropouts form one chain of data dependencies
(each one's input depends on the previous one's outputs), so every ORT execution order runs them in that
order and so does the hoisted chain; no other random op in the graph; constant ratio (float32) and
training_mode; masks held as bits. Draws are hoisted up to the last one of at least ``draw_bytes`` (input,
output and mask); the Dropouts after it keep their place. Costs one bit decoder per hoisted Dropout in the
forward (their bits are held for backward anyway).

Ordering: draw k + 1's zeros wait (a zero added to their shape) for draw k's output and its encoder, so the
draws run one after the other and each output and bool mask is freed before the next draw; the forward
readers of the graph input the chain starts from read it through a view that waits for the last draw, so
the draws run first under ORT's DEFAULT order too (PRIORITY runs them first by their place in the list).
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ..analysis import TensorClass, analysis_of
from ..custom_ops import contract
from .base import FORWARD_DECODER_MARK, OnnxcompPass, PassOutcome, Skipped
from .chunk_attention import _const_value
from .chunk_backward.regions import is_trigger
from .editor import TRIGGER_CONSTANTS, IrGraphEditor, ir_taken_names, stable_toposort
from .records import PassRecord

PREFIX = "onnxcomp_hoist"
PATTERN = "Dropout draw (hoisted to the step's start)"
_ONNX = ("", "ai.onnx")
_RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "BitmaskDropout", "BiasDropout", "BitmaskBiasDropout"})
_BITMASK_ENCODER = contract.encode_op("bitmask")
_BITMASK_DECODER = contract.decode_op("bitmask")


class HoistDropoutDrawsPass(OnnxcompPass):
    """The forward Dropouts' draws at the start of the step, in order (exact; see the module docstring).
    ``draw_bytes``: hoist up to the last Dropout whose draw (input, output, mask) is at least this large."""

    name = "hoist_dropout"

    def __init__(self, draw_bytes: int = 8 << 20) -> None:
        if draw_bytes < 0:
            raise ValueError(f"draw_bytes={draw_bytes}: at least 0")
        self.draw_bytes = draw_bytes

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        nodes = list(graph)
        if not any(n.op_type == "Dropout" and n.domain in _ONNX for n in nodes):
            return outcome
        analysis = analysis_of(model)
        backward = {nodes[i] for i in analysis.boundary.backward}
        dropouts = [n for n in nodes if n.op_type == "Dropout" and n.domain in _ONNX and n not in backward]
        if not dropouts:
            return outcome
        if any((p := d.inputs[0].producer()) is not None and p.name.startswith(PREFIX) for d in dropouts):
            outcome.skipped.append(Skipped(dropouts[0].name, PATTERN, "the draws are hoisted already"))
            return outcome
        others = sorted({n.op_type for n in nodes if n.op_type in _RANDOM})
        if others:
            outcome.skipped.append(Skipped(dropouts[0].name, PATTERN, f"other random ops ({', '.join(others)}) "
                                           "draw from ORT's generator too"))
            return outcome
        shapes = {v: tuple(t.shape) for n in nodes for v in [*n.inputs, *n.outputs]
                  if v is not None and (t := analysis.tensors.get(v.name)) is not None and t.shape is not None}
        prefix: list[tuple[ir.Node, ir.Node, ir.Node]] = []
        for k, d in enumerate(dropouts):
            if k and not _depends_on(d, dropouts[k - 1]):
                outcome.skipped.append(Skipped(d.name, PATTERN, f"does not depend on {dropouts[k - 1].name}: "
                                               "the execution order of the two draws is not fixed"))
                break
            found = _hoistable(d, shapes, backward)
            if isinstance(found, str):
                outcome.skipped.append(Skipped(d.name, PATTERN, found))
                break
            prefix.append((d, *found))
        big = [k for k, (d, _, _) in enumerate(prefix) if 9 * int(np.prod(shapes[d.inputs[0]])) >= self.draw_bytes]
        if not big:
            if prefix:
                outcome.skipped.append(Skipped(prefix[0][0].name, PATTERN, f"no draw of ≥ {self.draw_bytes} B "
                                               "among the Dropouts that can be hoisted"))
            return outcome
        prefix = prefix[:big[-1] + 1]
        parameters = {name for name, t in analysis.tensors.items() if t.cls is TensorClass.PARAMETER}
        start = _chain_start(graph, nodes, backward, parameters)
        if start is None:
            outcome.skipped.append(Skipped(prefix[0][0].name, PATTERN, "no float or integer graph input read in "
                                           "the forward pass to start the draws from"))
            return outcome
        for d, _, _ in prefix:
            outcome.records.append(PassRecord("moved", self.name, d.name, {
                "node": d.name, "op": "Dropout", "pattern": PATTERN, "exact": True,
                "draw_bytes": 9 * int(np.prod(shapes[d.inputs[0]])),
                "applied": "chunks read the decoded mask" if _zeros_input(d) else "Cast(mask)·X/(1 − ratio)",
                "note": "same draws in the same order; mask held as bits, decoded where the forward reads it"}))
        _rewrite(graph, nodes, prefix, start, shapes, ir_taken_names(graph))
        outcome.modified = True
        return outcome


def _depends_on(node: ir.Node, earlier: ir.Node) -> bool:
    """Whether ``node`` reads (transitively) an output of ``earlier``."""
    seen, stack = set(), [v.producer() for v in node.inputs if v is not None]
    while stack:
        p = stack.pop()
        if p is None or p in seen:
            continue
        if p is earlier:
            return True
        seen.add(p)
        stack.extend(v.producer() for v in p.inputs if v is not None)
    return False


def _zeros_input(d: ir.Node) -> bool:
    p = d.inputs[0].producer()
    if p is None or p.op_type != "ConstantOfShape" or p.domain not in _ONNX:
        return False
    value = p.attributes.get("value")
    return value is None or not np.any(value.value.numpy())


def _constant_or_initializer(v: ir.Value) -> bool:
    p = v.producer()
    return (p is None and v.const_value is not None) or (p is not None and p.op_type == "Constant" and not p.inputs)


def _hoistable(d: ir.Node, shapes: dict[ir.Value, tuple[int, ...]],
               backward: set[ir.Node]) -> tuple[ir.Node, ir.Node] | str:
    """(the mask's bitmask encoder, one of its decoders), or why ``d``'s draw cannot move to the start."""
    if len(d.inputs) < 3 or len(d.outputs) < 2 or not d.outputs[1].name or any(v is None for v in d.inputs[:3]):
        return "Dropout without ratio, training_mode or mask"
    if d.attributes.get("seed") is not None:
        return "Dropout with a seed attribute (its own generator)"
    x, ratio, mode = d.inputs[:3]
    y, mask = d.outputs[:2]
    if not (_constant_or_initializer(ratio) and _constant_or_initializer(mode)):
        return "ratio or training_mode is not a constant"
    if _const_value(mode) is not True or not isinstance(_const_value(ratio), float) or ratio.dtype != ir.DataType.FLOAT:
        return "training_mode not true, or the ratio not a float32 constant"
    if x.dtype != ir.DataType.FLOAT or x not in shapes:
        return "input not float32 with a known shape"
    encoders = [u.node for u in mask.uses() if u.node.op_type == _BITMASK_ENCODER]
    if len(encoders) != 1:
        return "mask not held as bits (run DropoutMaskPass first)"
    encoder = encoders[0]
    if any(u.node in backward for u in mask.uses()):
        return "the bool mask itself is read in backward"
    decoders = [u.node for u in encoder.outputs[0].uses() if u.node.op_type == _BITMASK_DECODER]
    if not decoders:
        return "no decoder of the mask's bits to copy"
    if _zeros_input(d):
        if _constant_or_initializer(x.producer().inputs[0]):
            return "drawn from zeros of a constant shape: nothing to time the mask's forward decoder by"
        if not all(is_trigger(u.node.op_type, [i.name if i is not None else "" for i in u.node.inputs])
                   for u in y.uses()):
            return "drawn from zeros, but its output is read for more than timing"
    elif any(u.node is encoder for u in y.uses()):
        return "its output is read by the mask's encoder"
    return encoder, decoders[0]


def _chain_start(graph: ir.Graph, nodes: list[ir.Node], backward: set[ir.Node],
                 parameters: set[str] = frozenset()) -> ir.Value | None:
    """The graph input read first in the forward pass (float or integer): the draws wait on it, so they are
    not folded into constants, and its forward readers wait on the last draw. A data input before any
    parameter: a parameter's first reader in the node list (say, a Transpose of a late layer's weight) may
    run late under ORT's DEFAULT order, and the last draw's output, read by the chain until then, would stay
    alive that long (GPT-tiny: the last attention draw, 16 MiB, until the last block's MLP)."""
    first: dict[ir.Value, int] = {}
    for i, n in enumerate(nodes):
        if n in backward:
            continue
        for v in n.inputs:
            if v is not None and v.is_graph_input() and v.const_value is None and v not in first:
                first[v] = i
    usable = [v for v in first if v.dtype in (ir.DataType.FLOAT, ir.DataType.INT64, ir.DataType.INT32,
                                                 ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BOOL)]
    return min(usable, key=lambda v: (v.name in parameters, first[v]), default=None)


def _float_trigger(ed: IrGraphEditor, v: ir.Value, base: str) -> ir.Value:
    """One element of ``v`` as a float [1]: a decoder's trigger that exists only once ``v`` does."""
    start, end, minus_one = (ed.shared_const(n, val) for n, val in TRIGGER_CONSTANTS)
    flat = ed.op("Reshape", [v, minus_one], "", v.dtype, None, out=f"{base}_flat")
    one = ed.op("Slice", [flat, start, end], "", v.dtype, [1], out=f"{base}_one")
    if v.dtype != ir.DataType.FLOAT:
        one = ed.op("Cast", [one], "", ir.DataType.FLOAT, [1], out=f"{base}_f32", to=ir.DataType.FLOAT)
    return one


def _rewrite(graph: ir.Graph, nodes: list[ir.Node], prefix: list[tuple[ir.Node, ir.Node, ir.Node]],
             start: ir.Value, shapes: dict[ir.Value, tuple[int, ...]], taken: set[str]) -> None:
    ed = IrGraphEditor(graph, taken, PREFIX)
    top: list[ir.Node] = []
    at: dict[ir.Node, list[ir.Node]] = {}       # forward nodes that take a Dropout's place in the list
    leave: set[ir.Node] = set()                 # nodes moved to the top, or dead
    one = ed.shared_tensor(f"{PREFIX}_one_f32", np.array(1.0, dtype=np.float32))
    zero_value = ir.tensor(np.zeros(1, dtype=np.float32))
    mark = len(ed.nodes)
    link = ed.zero_after(start, base=f"{PREFIX}_start")
    top += ed.nodes[mark:]
    for d, encoder, decoder in prefix:
        x, ratio = d.inputs[0], d.inputs[1]
        y, mask = d.outputs[0], d.outputs[1]
        tag = d.name.replace("/", "_").strip("_")
        base = f"{PREFIX}_{tag}"      # exact names (made unique by the editor)
        out = shapes[x]
        zeros = _zeros_input(d)
        # Where the Dropout was: its mask decoded from the bits (timed by what the draw waited for there: the
        # zeros' shape, or the input), and its output from the mask as the kernel computes it.
        mark = len(ed.nodes)
        trigger = _float_trigger(ed, x.producer().inputs[0] if zeros else x, f"{base}_trigger")
        decoded = ed.clone(decoder, [*encoder.outputs[:contract.ENCODER_ANCHOR], trigger],
                           [(ed.name(f"{tag}_mask_decoded"), ir.DataType.BOOL, list(out))],
                           name=ed.name(f"{tag}{FORWARD_DECODER_MARK}")).outputs[0]
        for u in list(mask.uses()):
            if u.node is not encoder:
                u.node.replace_input_with(u.idx, decoded)
        if zeros:     # read for timing only (checked): the trigger exists where the draw ran before
            for u in list(y.uses()):
                u.node.replace_input_with(u.idx, trigger)
            leave.add(x.producer())
        else:
            keep = ed.op("Sub", [one, ratio], f"{tag}_keep", ir.DataType.FLOAT, [])
            kept = ed.op("Cast", [decoded], f"{tag}_mask_f32", ir.DataType.FLOAT, list(out), to=ir.DataType.FLOAT)
            product = ed.op("Mul", [kept, x], f"{tag}_masked", ir.DataType.FLOAT, list(out))
            # The applied output takes the Dropout output's name (reports and later passes know it by it).
            name, y.name = y.name, ed.name(f"{tag}_drawn_zeros")
            ed.taken.discard(name)
            applied = ed.op("Div", [product, keep], "", ir.DataType.FLOAT, list(out), out=name)
            y.replace_all_uses_with(applied, replace_graph_outputs=True)
        at[d] = ed.nodes[mark:]
        # At the top: zeros that wait for the previous draw, the draw, its output read at once (ORT keeps an
        # output nobody reads), the mask's encoder; the next draw waits for both.
        mark = len(ed.nodes)
        shape = ed.op("Add", [ed.shared_const(f"onnxcomp_shape_{'x'.join(map(str, out))}", list(out)), link],
                      f"{tag}_zeros_shape", ir.DataType.INT64, [len(out)])
        drawn_from = ed.op("ConstantOfShape", [shape], f"{tag}_zeros", ir.DataType.FLOAT, list(out),
                           value=zero_value)
        d.replace_input_with(0, drawn_from)
        top += ed.nodes[mark:] + [d]
        mark = len(ed.nodes)
        y_done = ed.zero_after(y, ir.DataType.FLOAT, base=f"{base}_output_done")
        top += ed.nodes[mark:] + [encoder]
        mark = len(ed.nodes)
        bits_done = ed.zero_after(encoder.outputs[contract.ENCODER_ANCHOR], ir.DataType.INT64,
                                  base=f"{base}_bits_done")
        link = ed.op("Add", [y_done, bits_done], f"{tag}_drawn", ir.DataType.INT64, [1])
        top += ed.nodes[mark:]
        leave |= {d, encoder}
    # The forward waits for the last draw: its readers of the chain's start read a view gated on it.
    readers = [u for u in start.uses() if u.node not in top]
    mark = len(ed.nodes)
    dims = [int(s) for s in start.shape] if start.shape is not None and start.shape.is_static() else None
    gated = ed.gate(start, start, zero=link, shape=dims, elem=start.dtype, name=f"{PREFIX}_input_after_draws")
    top += ed.nodes[mark:]
    for u in readers:
        u.node.replace_input_with(u.idx, gated)
    # New list: the constants the top reads, the top, then the rest with each Dropout's forward nodes in its place.
    top_set = set(top)
    consts = [n for n in nodes if n.op_type == "Constant" and not n.inputs and n not in top_set
              and any(u.node in top_set for v in n.outputs for u in v.uses())]
    order = consts + top
    for n in nodes:
        if n in at:
            order += at[n]
        elif n not in leave and n not in consts:
            order.append(n)
    for n in leave - top_set:            # the zeros the chunked forward drew from: read by nothing now
        for i in range(len(n.inputs)):
            n.replace_input_with(i, None)
    sorted_order = stable_toposort(order, "hoist_dropout")
    if sorted_order[:len(consts) + len(top)] != order[:len(consts) + len(top)]:
        raise AssertionError("hoist_dropout: a hoisted draw reads a value made later in the step")
    graph.remove([n for n in graph])
    graph.extend(sorted_order)
