"""Shared machinery of the encoding passes: encode a stash after its producer, decode it just in time.

Execution order is what makes or breaks the saving (platform notes): an encoder that only a backward
decoder consumes would run in the backward pass under ORT's default order, keeping the activation alive.
So every encoder also emits its input's shape (``anchor``) and the forward consumers of a *gate* tensor read
``Reshape(gate, anchor)`` (a zero-copy view) — they cannot run before the encoder, under either order.
A decoder takes one element of its backward consumer's incoming gradient dY as an extra input, so it cannot
run before that gradient exists, i.e. just before the consumer; it sits right before it in node order too.
A consumer with no gradient input of its own (a recompute clone's gate, which waits on the clone's dY
through an int64 shape) lends the decoder the gradient that gate waits on (``decoder_trigger``).

The pass edits the onnx-ir graph in place: the encoder goes right after the target's producer
(``graph.insert_after``), the decoder right before the stash's first backward reader (``insert_before``),
and readers are rewired through use/def links (``Value.uses()``, ``replace_input_with``). Nodes are made
with the ``IrGraphEditor``; op types, slots and params follow ``custom_ops.contract``.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx_ir as ir

from ..analysis import GraphAnalysis, StashedTensor, analysis_of, numel
from ..custom_ops import checked_params, contract, get_codec
from ..metadata import merge_size_hints
from .base import OnnxcompPass, PassOutcome, Skipped
from .editor import TRIGGER_CONSTANTS, IrGraphEditor, ir_taken_names, unique_name
from .records import PassRecord


@dataclass
class Encoding:
    """How one stashed tensor is to be held."""
    source: str                  # the stashed tensor its backward consumers read
    target: str                  # the forward tensor the encoder reads (source, or an equivalent)
    gate: str                    # forward consumers of this tensor are made to wait for the encoder
    codec: str
    params: dict[str, Any] = field(default_factory=dict)
    payload_bytes: list[int | None] = field(default_factory=list)  # predicted, per payload output
    payload_shapes: list[list[int] | None] = field(default_factory=list)
    note: str = ""
    # "element": the decoder waits on one element of dY; "l2": on ReduceL2(dY), which also hands the
    # run-time bound controller the scale of dY (onnxcomp.runtime.bounds) for one float of PyOp input.
    trigger: str = "element"
    # Backward readers (op types) rewired to the decoded copy; None: all. The others keep reading the
    # stash, which a later pass may encode differently (e.g. sign bits for ReluGrad, sz for ConvGrad).
    readers: tuple[str, ...] | None = None
    # Held by standard ONNX ops instead of PyOps (no bridge copies): "fp16" = Clip to ±65504 then Cast,
    # bit-identical to the dpr_fp16 codec except that ±Inf saturates too; "bits" = a boolean tensor (or
    # Greater(target, 0) with ``sign_test``) packed 8 per byte by MatMulInteger and unpacked by a Gather from
    # a 256-row table: the ``bitmask`` codec's bits byte for byte and the same bool decode (_encode_native_bits).
    native: str | None = None
    # The encoder reads Greater(target, 0) (bool, one byte per element, computed by ORT) instead of the float
    # target: the codec must take bool (``bitmask``). The PyOp bridge copies every input into a fresh array,
    # so a float encoder input costs 4 bytes per element outside ORT's memory pattern while the encoder
    # runs, on top of the pattern's block under ORT's default settings (ResNet-18 b32 64x64: the stem's
    # 8 MiB ReLU input was the whole step's peak there).
    sign_test: bool = False


# Node-name suffix of a native encoder's first node: how later passes tell the stash is already taken.
NATIVE_ENCODER_SUFFIX = "__native_encode"
# Node-name mark of a native bit encoder's anchor (``shape + zero_after(payload)``): the view
# ``Reshape(gate, anchor)`` is the gate itself, which the recompute pass sees through (is_native_anchor).
NATIVE_ANCHOR_MARK = "__native_anchor"
_FP16_MAX = 65504.0
NATIVE_FORMS = ("fp16", "bits", "maxpool")
# The native bit decoder's table: row v = the 8 booleans byte v holds, element i in bit i % 8 (np.packbits
# little bit order, as the bitmask codec). Passes recognise a native bit decode by this initializer's name.
NATIVE_BITS_LUT = "onnxcomp_bits_lut_bool"
_BITS_LUT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(np.bool_)
# The same table as float32 0.0 / 1.0: a decode whose only reader is Cast(mask, float) gathers from it instead
# (passes/mask_grad.py), giving Cast's values without the bool buffer and the Cast.
NATIVE_BITS_LUT_FLOAT = "onnxcomp_bits_lut_float"
BITS_LUT_FLOAT = _BITS_LUT.astype(np.float32)
# Bit weights of the packing MatMulInteger: element 8k + i of the tensor lands in bit i of byte k.
_BITS_WEIGHTS = (1 << np.arange(8, dtype=np.uint8)).astype(np.uint8).reshape(8, 1)


class EncodeStashPass(OnnxcompPass):
    """Base of the one-encoding-per-module passes: subclasses only choose tensors and codec params
    (``select``), and may finish the rewrite where their gradient op reads the decoded form (``finish``)."""

    encoding: str  # analysis encoding name this pass implements, e.g. "signbits"
    # Per-pattern choices from a policy config file: pattern → encoding name (or "none").
    overrides: dict[str, str] = {}
    # Take stashes an earlier pass encoded for only some of their backward readers (the rest still read
    # the original); passes that assume the whole stash is theirs leave this False.
    encodes_remaining_readers = True
    # Stash names this pass may take (the auto planner's per-tensor choice); None: every applicable stash.
    only: set[str] | None = None

    @abstractmethod
    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        """An Encoding for this stash, or the reason it is left alone."""

    def finish(self, model: ir.Model) -> None:
        """Called once after this pass encoded at least one stash (default: nothing to finish)."""

    def float_stash_problem(self, stash: StashedTensor, min_bytes: int) -> str | None:
        """Why a float32 codec cannot take this stash (dtype, unresolved shape, too small), or None."""
        if stash.dtype != "float32":
            return f"dtype {stash.dtype}: the {self.name} ops take float32"
        if stash.shape is None:
            return "shape unresolved"
        if stash.nbytes < min_bytes:
            return f"only {stash.nbytes} bytes: below min_bytes, the op's overhead would outweigh the saving"
        return None

    def applies(self, stash: StashedTensor) -> bool:
        return self.encoding in stash.encodings

    def payload_types(self, codec: str) -> list[ir.DataType]:
        return [ir.DataType.from_numpy(np.dtype(d)) for d in get_codec(codec).payload_dtypes]

    def call(self, model: ir.Model) -> PassOutcome:
        analysis = analysis_of(model)
        outcome = PassOutcome(model, False)
        choices: list[tuple[StashedTensor, Encoding]] = []
        for stash in analysis.stashed:
            if not self.applies(stash) or (self.only is not None and stash.name not in self.only):
                continue
            if already_encoded(analysis, stash.name) and not self.encodes_remaining_readers:
                continue
            chosen = self.overrides.get(stash.pattern)
            if chosen is not None and chosen != self.encoding:
                outcome.skipped.append(Skipped(stash.name, stash.pattern, f"config assigns this pattern to {chosen!r}"))
                continue
            first = min(stash.backward_consumers)
            if decoder_trigger(analysis, first, stash.name) is None:
                outcome.skipped.append(Skipped(stash.name, stash.pattern, "its first backward reader has no "
                                               "incoming gradient to time a decoder by"))
                continue
            choice = self.select(analysis, stash)
            if isinstance(choice, str):
                outcome.skipped.append(Skipped(stash.name, stash.pattern, choice))
            elif choice.trigger == "l2" and analysis.incoming_gradient(first, stash.name) is None:
                # ReduceL2 of a gate's trigger element would hand the bound controller a wrong dY scale.
                outcome.skipped.append(Skipped(stash.name, stash.pattern, "its first backward reader is a "
                                               "recompute gate, not a gradient op: no dY scale for the bound"))
            else:
                choices.append((stash, choice))
        if not choices:
            return outcome
        site = _Site.of(model, analysis)
        declare_custom_ops(model)
        for stash, enc in choices:
            detail = (_encode_native if enc.native is not None else _encode_codec)(site, stash, enc, self)
            outcome.records.append(PassRecord("encoded", self.name, enc.source, detail))
        _merge_plan_metadata(model, outcome.records)
        self.finish(model)
        outcome.modified = True
        return outcome


# How many nodes back from a backward reader the trigger search may look (a recompute gate's chain
# Reshape ← Add ← Cast ← Less ← Slice is five).
_GATE_SEARCH_NODES = 8


def decoder_trigger(analysis: GraphAnalysis, node: int | Any, exclude: str) -> str | None:
    """The gradient a decoder placed before ``node`` (an index, or a node with this graph's input names)
    waits on: the node's own incoming gradient dY; failing that, the nearest gradient its backward-made
    inputs were computed from. The second case is a recompute clone's gate,
    ``Reshape(stash, shape + Cast(Less(t, t)))`` with ``t`` one element of the clone's dY (passes/editor.py):
    its only backward input is an int64 shape, yet it cannot run before that dY exists, so neither can a
    decoder that waits on ``t``. Forward tensors, weights and constants are never followed."""
    found = analysis.incoming_gradient(node, exclude)
    if found is not None:
        return found
    proto = analysis.model.graph.node[node] if isinstance(node, int) else node
    frontier = [i for i in proto.input if i and i != exclude]
    seen: set[str] = set()
    visited = 0
    while frontier and visited < _GATE_SEARCH_NODES:
        name = frontier.pop(0)
        tensor = analysis.tensors.get(name)
        if name in seen or tensor is None or tensor.producer is None \
                or not analysis.boundary.is_backward(tensor.producer):
            continue
        seen.add(name)
        if analysis.is_gradient(name):
            return name
        visited += 1
        frontier.extend(i for i in analysis.model.graph.node[tensor.producer].input if i and i not in seen)
    return None


def already_encoded(analysis: GraphAnalysis, name: str) -> bool:
    t = analysis.tensors[name]
    nodes = analysis.model.graph.node
    return any(contract.is_encoder(nodes[c].domain, nodes[c].op_type)
               or nodes[c].name.endswith(NATIVE_ENCODER_SUFFIX) for c in t.consumers)


def declare_custom_ops(model: ir.Model) -> None:
    """Import onnxcomp's custom-op domain and record the op-set version the inserted ops follow."""
    model.opset_imports.setdefault(contract.DOMAIN, contract.DOMAIN_VERSION)
    model.metadata_props[contract.OPSET_METADATA_KEY] = str(contract.OPSET_VERSION)


@dataclass
class _Site:
    """What one pass run's insertions share: the graph, its analysis (of the graph before the run), the
    editor, the graph's values by name, and which nodes count as backward (the analysis's, plus the
    decoders made so far) or as this run's encoders (never rewired to read an anchored view)."""
    graph: ir.Graph
    analysis: GraphAnalysis
    editor: IrGraphEditor
    values: dict[str, ir.Value]
    order: dict[ir.Node, int]          # node-list index in the analysed graph (insertions keep it relative)
    backward: set[ir.Node]
    encoders: set[ir.Node] = field(default_factory=set)

    @classmethod
    def of(cls, model: ir.Model, analysis: GraphAnalysis) -> _Site:
        graph = model.graph
        nodes = list(graph)
        values = {v.name: v for v in graph.inputs} | dict(graph.initializers)
        values.update((v.name, v) for n in nodes for v in n.outputs if v.name)
        return cls(graph, analysis, IrGraphEditor(graph, ir_taken_names(graph), prefix=""), values,
                   {n: i for i, n in enumerate(nodes)}, {nodes[i] for i in analysis.boundary.backward})

    def name(self, base: str) -> str:
        return unique_name(base, self.editor.taken)

    def made(self, since: int) -> list[ir.Node]:
        """The editor's nodes made since ``since`` (its length then)."""
        return self.editor.nodes[since:]

    def type_of(self, name: str) -> tuple[ir.DataType, list[int] | None]:
        t = self.analysis.tensors[name].type
        return ir.DataType.from_numpy(np.dtype(t.dtype)), (list(t.shape) if t.shape is not None else None)

    def producer(self, name: str) -> ir.Node:
        node = self.values[name].producer()
        if node is None:
            raise ValueError(f"{name}: a graph input or initializer has no producer to encode after")
        return node

    def forward_readers(self, gate: ir.Value) -> list[ir.Node]:
        return list(dict.fromkeys(u.node for u in gate.uses()
                                  if u.node not in self.backward and u.node not in self.encoders))

    def backward_readers(self, source: ir.Value, ops: tuple[str, ...] | None) -> list[ir.Node]:
        return list(dict.fromkeys(u.node for u in source.uses() if u.node in self.backward
                                  and (ops is None or u.node.op_type in ops)))

    def first(self, nodes: list[ir.Node]) -> ir.Node:
        if any(n not in self.order for n in nodes):      # a node made in this run: index the graph afresh
            self.order = {n: i for i, n in enumerate(self.graph)}
        return min(nodes, key=self.order.__getitem__)

    def incoming_gradient(self, node: ir.Node, exclude: str) -> str:
        """The analysis's dY of ``node`` as wired now (readers rewired earlier in this run read decoded
        copies, which are no gradients)."""
        found = decoder_trigger(self.analysis, SimpleNamespace(input=[v.name if v is not None else ""
                                                                      for v in node.inputs]), exclude)
        assert found is not None, "call() checks the first backward reader has a gradient to wait on"
        return found


def _rewire(nodes: list[ir.Node], old: ir.Value, new: ir.Value) -> None:
    """Every input slot of ``nodes`` that reads ``old`` reads ``new`` instead."""
    chosen = set(nodes)
    for use in list(old.uses()):
        if use.node in chosen:
            use.node.replace_input_with(use.idx, new)


def _typed(value: ir.Value, elem: ir.DataType, shape: list[int | str | None] | None) -> None:
    value.type = ir.TensorType(elem)
    if shape is not None:
        value.shape = ir.Shape(shape)


def _trigger_constants(site: _Site) -> tuple[ir.Value, ir.Value, ir.Value]:
    start, end, flat = (site.editor.shared_const(n, v) for n, v in TRIGGER_CONSTANTS)
    return start, end, flat


def _encode_codec(site: _Site, stash: StashedTensor, enc: Encoding, pass_: EncodeStashPass) -> dict[str, Any]:
    """A codec's PyOp pair: encoder after the target's producer, decoder before the first backward reader."""
    ed, values = site.editor, site.values
    base = enc.source.replace("/", "_").strip("_")
    payload_types = pass_.payload_types(enc.codec)
    payload = [site.name(f"{base}__{enc.codec}_p{k}") for k in range(len(payload_types))]
    anchor_name = site.name(f"{base}__{enc.codec}_anchor")
    enc.params = checked_params(enc.codec, enc.params, enc.source)
    codec_obj = get_codec(enc.codec)
    sized_by_data = any(shp is None and name != "shape" for name, shp in
                        zip(codec_obj.payload_names, enc.payload_shapes or [None] * len(payload_types)))
    if sized_by_data:
        # A payload whose size depends on the data cannot be declared static: ORT allocates it outside its
        # memory pattern, from its arena, during the step. Under ORT's default settings such an allocation
        # opens a second arena region as large as the pattern's and the pattern block then alternates between
        # the two, both resident (docs/notes/reuse.md, "2P"; MobileNetV2 b32 64x64 auto --exact: one 6 MiB
        # sparse payload, growth 125.9 -> 207.0 MiB from the second step). The payload store holds it instead
        # (runtime/payload_store.py, "inline": same codec call, same bytes) and ORT carries a token frame.
        enc.params = {**enc.params, "store": "inline"}
    params = contract.params_value(enc.params)

    # Encoder right after the target's producer; then the gate's forward readers wait on it.
    encoded = values[enc.target]
    after = site.producer(enc.target)
    if enc.sign_test:
        _, tgt_shape = site.type_of(enc.target)
        zero = ed.shared_tensor("onnxcomp_zero_f32", np.zeros((), dtype=np.float32))
        test = ed.node("Greater", [encoded, zero], [(site.name(f"{base}__positive"), ir.DataType.BOOL, tgt_shape)],
                       name=site.name(f"{base}__positive__greater"))
        site.graph.insert_after(after, test)
        site.encoders.add(test)
        encoded, after = test.outputs[0], test
    encoder = ed.untyped(contract.encode_op(enc.codec), [encoded], [*payload, anchor_name],
                         name=site.name(f"{base}__encode_{enc.codec}"), domain=contract.DOMAIN,
                         **{contract.PARAMS_ATTR: params})
    site.encoders.add(encoder)
    site.graph.insert_after(after, encoder)
    anchor = encoder.outputs[contract.ENCODER_ANCHOR]
    gate = values[enc.gate]
    gated_name = site.name(f"{enc.gate.replace('/', '_').strip('_')}__anchored")
    readers = site.forward_readers(gate)
    if readers:
        elem, shape = site.type_of(enc.gate)
        gated = ed.node("Reshape", [gate, anchor], [(gated_name, elem, shape)],
                        name=site.name(f"{gated_name}__reshape")).outputs[0]
        site.graph.insert_after(encoder, gated.producer())
        _rewire(readers, gate, gated)

    # Decoder just before the first backward reader, triggered by one element of that reader's dY.
    # (Shape(dY) would not do: ORT folds the Shape of a statically shaped tensor into a constant, and
    # the decoder then runs in the forward pass.)
    source = values[enc.source]
    bwd_readers = site.backward_readers(source, enc.readers)
    first = site.first(bwd_readers)
    d_y = values[site.incoming_gradient(first, enc.source)]
    decoded_name = site.name(f"{base}__decoded")
    trigger_name = site.name(f"{base}__{enc.codec}_trigger")
    flat_name = site.name(f"{trigger_name}_flat")
    start, end, minus_one = _trigger_constants(site)
    since = len(ed.nodes)
    if enc.trigger == "l2":
        flat = ed.untyped("ReduceL2", [d_y], [flat_name], name=site.name(f"{flat_name}__reducel2"),
                          keepdims=1).outputs[0]
        trigger = ed.node("Reshape", [flat, minus_one], [(trigger_name, ir.DataType.FLOAT, [None])],
                          name=site.name(f"{trigger_name}__reshape")).outputs[0]
        enc.params = {**enc.params, "dy_numel": _static_numel(site, d_y.name)}
        params = contract.params_value(enc.params)
    elif enc.trigger == "element":
        flat = ed.untyped("Reshape", [d_y, minus_one], [flat_name], name=site.name(f"{flat_name}__reshape")).outputs[0]
        trigger = ed.node("Slice", [flat, start, end], [(trigger_name, ir.DataType.FLOAT, [None])],
                          name=site.name(f"{trigger_name}__slice")).outputs[0]
    else:
        raise ValueError(f"unknown decoder trigger {enc.trigger!r}")
    out_elem = ir.DataType.from_numpy(np.dtype(get_codec(enc.codec).output_dtype))
    src_elem, src_shape = site.type_of(enc.source)
    decoder = ed.node(contract.decode_op(enc.codec), [*encoder.outputs[:contract.ENCODER_ANCHOR], trigger],
                      [(decoded_name, out_elem, src_shape)], name=site.name(f"{base}__decode_{enc.codec}"),
                      domain=contract.DOMAIN, **{contract.PARAMS_ATTR: params})
    new_nodes = site.made(since)
    site.graph.insert_before(first, new_nodes)
    site.backward.update(new_nodes)
    _rewire(bwd_readers, source, decoder.outputs[contract.DECODER_OUTPUT])

    # Types: payload (shape known when the codec's size is), anchor.
    framed = [n == "shape" for n in get_codec(enc.codec).payload_names]  # runtime/framing.py appends words
    for value, elem, shp, fr in zip(encoder.outputs[:contract.ENCODER_ANCHOR], payload_types,
                                    enc.payload_shapes or [None] * len(payload), framed):
        shp = None if fr else shp  # a declared [ndim] breaks ORT's buffer reuse (mem pattern/reuse on)
        if sized_by_data:
            # The payload store holds the payload: the op hands ORT an empty array for every payload but the
            # token frame (framing.stored_payload; a failed encode too, framing.failed_payload). Declared with
            # the codec's size instead (zfp's [words]), ORT's buffer-reuse planner lets a later tensor of that
            # shape take this empty buffer and the step aborts ("Shape mismatch attempting to re-use buffer.
            # {0} != {8192}": mobilenet_v1_s auto at 4.6 MiB, a native-bits index after a zfp decoder), and the
            # memory pattern reserves bytes nobody writes. A symbolic length of its own matches no other
            # tensor; the plan's size hint (PLAN_METADATA_KEY) still sizes it for the predictor.
            shp = None
        _typed(value, elem, shp if shp is not None else [f"{value.name}_len"])
    _, tgt_shape = site.type_of(enc.target)
    _typed(anchor, ir.DataType.INT64, [len(tgt_shape)] if tgt_shape else None)
    predicted = sum(b for b in enc.payload_bytes if b is not None) if enc.payload_bytes else None
    return {
        "tensor": enc.source, "encoded_tensor": enc.target, "pattern": stash.pattern,
        "encoding": pass_.encoding, "codec": enc.codec, "params": enc.params,
        "shape": list(stash.shape) if stash.shape else None, "original_bytes": stash.nbytes,
        "predicted_bytes": predicted, "payload": dict(zip(payload, enc.payload_bytes)),
        "encoder": encoder.name, "decoder": decoder.name, "note": enc.note,
    }


def native_bits_problem(numel_: int | None) -> str | None:
    """Why the native bit packing cannot hold a tensor of ``numel_`` elements, or None. It packs rows of 8
    elements (Reshape [n/8, 8]); a ragged tail would need padding, which the bitmask PyOp handles instead."""
    if numel_ is None:
        return "shape unresolved"
    if numel_ % 8:
        return f"{numel_} elements: not a multiple of 8"
    return None


def is_native_anchor(name: str) -> bool:
    """Whether a node (by name) makes a native bit encoder's anchor: ``Reshape(x, anchor)`` is then a
    zero-copy view of x that waits for the encoder, as a PyOp encoder's anchor view."""
    base, _, k = name.rpartition("_")
    return name.endswith(NATIVE_ANCHOR_MARK) or (k.isdigit() and base.endswith(NATIVE_ANCHOR_MARK))


def is_native_bits_decode(node: ir.Node) -> bool:
    """Whether ``node`` is the last node of a native bit decode (``Reshape(Gather(LUT, bytes), shape)``): its
    output is the decoded boolean tensor, as a ``bitmask`` decoder's."""
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return False
    gather = node.inputs[0].producer()
    return gather is not None and gather.op_type == "Gather" and gather.inputs[0] is not None \
        and gather.inputs[0].name == NATIVE_BITS_LUT


def is_native_float_mask_decode(node: ir.Node) -> bool:
    """Whether ``node`` is the last node of a native bit decode that gathers from the float table
    (``Reshape(Gather(float LUT, bytes), shape)``): its output is the mask as float32 0.0 / 1.0, the values of
    ``Cast(bool decode, float)``."""
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return False
    gather = node.inputs[0].producer()
    return gather is not None and gather.op_type == "Gather" and gather.inputs[0] is not None \
        and gather.inputs[0].name == NATIVE_BITS_LUT_FLOAT


def _encode_native(site: _Site, stash: StashedTensor, enc: Encoding, pass_: EncodeStashPass) -> dict[str, Any]:
    if enc.native == "bits":
        return _encode_native_bits(site, stash, enc, pass_)
    if enc.native == "maxpool":
        from .maxpool_index import encode_native_pool   # that module imports this one

        return encode_native_pool(site, stash, enc, pass_)
    return _encode_native_fp16(site, stash, enc, pass_)


def _hold_back_gate_readers(site: _Site, ed: IrGraphEditor, enc: Encoding, gate: ir.Value, readers: list[ir.Node],
                            anchor: ir.Value, new_fwd: list[ir.Node], keep: int) -> list[ir.Node]:
    """A native encoder's forward nodes, registered as encoders: the gate's forward readers read it through a
    Reshape by ``anchor`` (which depends on the payload), so ORT cannot free the stash before the payload exists.
    With no such readers the anchor is not needed: the nodes after the first ``keep`` are dropped."""
    site.encoders.update(new_fwd)
    if readers:
        elem, gshape = site.type_of(enc.gate)
        gated_name = site.name(f"{enc.gate.replace('/', '_').strip('_')}__anchored")
        gated = ed.node("Reshape", [gate, anchor], [(gated_name, elem, gshape)],
                        name=site.name(f"{gated_name}__reshape")).outputs[0]
        new_fwd.append(gated.producer())
        site.encoders.add(gated.producer())
        _rewire(readers, gate, gated)
        return new_fwd
    for node in reversed(new_fwd[keep:]):
        for k in range(len(node.inputs)):
            node.replace_input_with(k, None)
    anchor.type = None         # declared only where the anchor exists
    return new_fwd[:keep]


def _pack_bytes(site: _Site, codes: ir.Value, grouped_shape: ir.Value, grouped: list[int], weights: ir.Value,
                payload_name: str, base: str, tag: str, group_name: str) -> ir.Value:
    """uint8 ``codes`` packed k to a byte: viewed as ``grouped`` = [rows, k] (the shape tensor ``grouped_shape``),
    times the [k, 1] bit weights ``weights`` by MatMulInteger (int32 row sums, each < 256), cast back to uint8
    [rows, 1] named ``payload_name``. Shared by the native sign bits (8 a byte, ``tag`` "bits") and the native
    MaxPool codes (two 4-bit codes a byte, "pool"); node names ``{base}__{tag}_…`` as passes recognise them."""
    ed = site.editor
    u8, i32 = ir.DataType.UINT8, ir.DataType.INT32
    rows = grouped[0]
    view = ed.node("Reshape", [codes, grouped_shape], [(site.name(f"{base}__{tag}_{group_name}"), u8, grouped)],
                   name=site.name(f"{base}__{tag}_{group_name}__reshape")).outputs[0]
    summed = ed.node("MatMulInteger", [view, weights], [(site.name(f"{base}__{tag}_i32"), i32, [rows, 1])],
                     name=site.name(f"{base}__{tag}_pack")).outputs[0]
    return ed.node("Cast", [summed], [(payload_name, u8, [rows, 1])], to=u8,
                   name=site.name(f"{base}__encode_{tag}_cast")).outputs[0]


def _anchor_forward(site: _Site, enc: Encoding, gate: ir.Value, readers: list[ir.Node], payload: ir.Value,
                    shape_c: ir.Value, rank: int, anchor_base: str, since: int) -> None:
    """Make the gate's forward ``readers`` wait on ``payload`` (a shape anchor ``shape + zero(payload)``), so a
    native encoder runs in the forward pass under either execution order and its input is freed there; insert the
    nodes made since ``since`` after the stash's producer. (Less has no uint8 kernel: zero_after casts the one
    element to float.)"""
    ed = site.editor
    zero_fwd = ed.zero_after(payload, ir.DataType.UINT8, base=anchor_base)
    anchor_name = site.name(anchor_base)
    anchor = ed.node("Add", [shape_c, zero_fwd], [(anchor_name, ir.DataType.INT64, [rank])],
                     name=site.name(f"{anchor_name}{NATIVE_ANCHOR_MARK}")).outputs[0]
    made = site.made(since)
    new_fwd = _hold_back_gate_readers(site, ed, enc, gate, readers, anchor, made,
                                      keep=made.index(payload.producer()) + 1)
    site.graph.insert_after(site.producer(enc.target), new_fwd)


def _backward_entry(site: _Site, enc: Encoding) -> tuple[list[ir.Node], ir.Node, str]:
    """The stash's backward readers, the first of them to run, and the incoming gradient it waits on (a native
    decoder is gated on it, so it runs just before its reader)."""
    bwd_readers = site.backward_readers(site.values[enc.source], enc.readers)
    first = site.first(bwd_readers)
    return bwd_readers, first, site.incoming_gradient(first, enc.source)


def _insert_decoder(site: _Site, since: int, first: ir.Node, bwd_readers: list[ir.Node], source: ir.Value,
                    decoded: ir.Value) -> None:
    """Put the decode nodes made since ``since`` before the first backward reader, count them as backward, and
    have the stash's backward readers read ``decoded`` instead of ``source``."""
    dec_nodes = site.made(since)
    site.graph.insert_before(first, dec_nodes)
    site.backward.update(dec_nodes)
    _rewire(bwd_readers, source, decoded)


def _encode_native_bits(site: _Site, stash: StashedTensor, enc: Encoding, pass_: EncodeStashPass) -> dict[str, Any]:
    """One bit per element with standard ops (opset 10+), no PyOp and so no bridge copies:

    encode (after the target's producer): ``[Greater(target, 0) →] Cast(uint8) → Reshape [n/8, 8] →
    MatMulInteger(·, [1, 2, …, 128]ᵀ) → Cast(uint8)``: payload uint8 [n/8, 1], the bytes ``np.packbits(m,
    bitorder="little")`` gives (the bitmask codec's ``bits``; its int64 shape payload is a constant here);
    decode (before the first backward reader): ``Reshape(payload, [n/8] + zero(dY)) → Cast(int32) →
    Gather(LUT [256, 8] bool) → Reshape(shape)``: the codec's bool decode. The gate's forward readers read
    ``Reshape(gate, shape + zero(payload))`` as in the PyOp path, so the encoder runs in the forward pass under
    either execution order."""
    ed, values = site.editor, site.values
    u8, i32, i64, b8 = ir.DataType.UINT8, ir.DataType.INT32, ir.DataType.INT64, ir.DataType.BOOL
    base = enc.source.replace("/", "_").strip("_")
    shape = list(stash.shape)
    n = numel(shape)
    problem = native_bits_problem(n)
    if problem:
        raise ValueError(f"{enc.source}: native bits: {problem} (select() must not choose it)")
    tgt_elem, tgt_shape = site.type_of(enc.target)
    if tgt_shape is None or numel(tgt_shape) != n:
        raise ValueError(f"{enc.target}: native bits need the target's static shape, {n} elements")
    if not enc.sign_test and tgt_elem != b8:
        raise ValueError(f"{enc.target}: native bits pack a bool tensor (or sign_test on a float one)")
    rows, nbytes = n // 8, n // 8
    shape_c = ed.shared_const(f"onnxcomp_shape_{'x'.join(map(str, shape)) or 'scalar'}", shape, [len(shape)])
    rows8 = ed.shared_const(f"onnxcomp_shape_{rows}x8", [rows, 8], [2])
    flat_c = ed.shared_const(f"onnxcomp_shape_{rows}", [rows], [1])
    weights = ed.shared_tensor("onnxcomp_bits_weights", _BITS_WEIGHTS)
    gate = values[enc.gate]
    readers = site.forward_readers(gate)     # before the encoder exists (it may read the gate itself)
    since = len(ed.nodes)
    mask = values[enc.target]
    if enc.sign_test:
        zero = ed.shared_tensor("onnxcomp_zero_f32", np.zeros((), dtype=np.float32))
        mask = ed.node("Greater", [mask, zero], [(site.name(f"{base}__positive"), b8, tgt_shape)],
                       name=site.name(f"{base}__positive__greater")).outputs[0]
    # The node that reads the stash itself carries the suffix (as the PyOp encoder would read it): with a
    # sign test that is Greater, which is no encoder (the PyOp path's Greater is not either).
    first_name = site.name(f"{base}__bits_u8" + ("" if enc.sign_test else NATIVE_ENCODER_SUFFIX))
    as_u8 = ed.node("Cast", [mask], [(site.name(f"{base}__bits_u8"), u8, tgt_shape)], to=u8,
                    name=first_name).outputs[0]
    payload_name = site.name(f"{base}__bits_p0")
    payload = _pack_bytes(site, as_u8, rows8, [rows, 8], weights, payload_name, base, "bits", "rows")
    _anchor_forward(site, enc, gate, readers, payload, shape_c, len(shape), f"{base}__bits_anchor", since)
    source = values[enc.source]
    bwd_readers, first, d_y_name = _backward_entry(site, enc)
    lut = ed.shared_tensor(NATIVE_BITS_LUT, _BITS_LUT)
    since = len(ed.nodes)
    dzero = ed.zero_after(values[d_y_name], site.type_of(d_y_name)[0], base=f"{base}__bits_trigger")
    dshape = ed.node("Add", [flat_c, dzero], [(site.name(f"{base}__bits_shape"), i64, [1])],
                     name=site.name(f"{base}__bits_shape__add")).outputs[0]
    view = ed.node("Reshape", [payload, dshape], [(site.name(f"{base}__bits_gated"), u8, [rows])],
                   name=site.name(f"{base}__bits_gated__reshape")).outputs[0]
    index = ed.node("Cast", [view], [(site.name(f"{base}__bits_index"), i32, [rows])], to=i32,
                    name=site.name(f"{base}__bits_index__cast")).outputs[0]
    rows_out = ed.node("Gather", [lut, index], [(site.name(f"{base}__bits_unpacked"), b8, [rows, 8])],
                       name=site.name(f"{base}__bits_unpack"), axis=0).outputs[0]
    decoded_name = site.name(f"{base}__decoded")
    decoder = ed.node("Reshape", [rows_out, shape_c], [(decoded_name, b8, shape)],
                      name=site.name(f"{base}__decode_bits"))
    _insert_decoder(site, since, first, bwd_readers, source, decoder.outputs[0])
    return {
        "tensor": enc.source, "encoded_tensor": enc.target, "pattern": stash.pattern,
        "encoding": pass_.encoding, "codec": enc.codec, "native": enc.native, "params": enc.params,
        "shape": shape, "original_bytes": stash.nbytes, "predicted_bytes": nbytes,
        "payload": {payload_name: nbytes}, "encoder": first_name, "decoder": decoder.name, "note": enc.note,
    }


def _encode_native_fp16(site: _Site, stash: StashedTensor, enc: Encoding, pass_: EncodeStashPass) -> dict[str, Any]:
    """Clip + Cast to float16 after the producer; Cast back just before the first backward reader.

    Same timing guarantees as the PyOp path, with standard ops: the gate's forward readers read
    ``Reshape(gate, shape + zero(payload))`` and the decoding Cast reads ``Reshape(payload, shape +
    zero(dY))`` (zero-copy views; the editor's ``zero_after``)."""
    if enc.native != "fp16":
        raise ValueError(f"unknown native encoding {enc.native!r}")
    ed, values = site.editor, site.values
    f32, f16, i64 = ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.INT64
    base = enc.source.replace("/", "_").strip("_")
    shape = list(stash.shape)
    shape_c = ed.shared_const(f"onnxcomp_shape_{'x'.join(map(str, shape)) or 'scalar'}", shape, [len(shape)])
    lo = ed.shared_tensor("onnxcomp_fp16_min", np.array(-_FP16_MAX, dtype=np.float32))
    hi = ed.shared_tensor("onnxcomp_fp16_max", np.array(_FP16_MAX, dtype=np.float32))
    clipped_name, payload_name = (site.name(f"{base}__fp16_{s}") for s in ("clipped", "p0"))
    gate = values[enc.gate]
    readers = site.forward_readers(gate)     # before the encoder exists (it may read the gate itself)
    since = len(ed.nodes)
    clip = ed.node("Clip", [values[enc.target], lo, hi], [(clipped_name, f32, shape)],
                   name=site.name(f"{base}{NATIVE_ENCODER_SUFFIX}"))
    payload = ed.node("Cast", [clip.outputs[0]], [(payload_name, f16, shape)], to=ir.DataType.FLOAT16,
                      name=site.name(f"{base}__encode_fp16_cast")).outputs[0]
    zero = ed.zero_after(payload, f16, base=f"{base}__fp16_anchor")
    anchor_name = site.name(f"{base}__fp16_anchor")
    anchor = ed.node("Add", [shape_c, zero], [(anchor_name, i64, [len(shape)])],
                     name=site.name(f"{anchor_name}__add")).outputs[0]
    new_fwd = _hold_back_gate_readers(site, ed, enc, gate, readers, anchor, site.made(since), keep=2)
    site.graph.insert_after(site.producer(enc.target), new_fwd)

    source = values[enc.source]
    bwd_readers, first, d_y_name = _backward_entry(site, enc)
    since = len(ed.nodes)
    dzero = ed.zero_after(values[d_y_name], site.type_of(d_y_name)[0], base=f"{base}__fp16_trigger")
    dshape_name, view_name, decoded_name = (site.name(f"{base}__{s}") for s in ("fp16_shape", "fp16_gated", "decoded"))
    decoder_name = site.name(f"{base}__decode_fp16_cast")
    dshape = ed.node("Add", [shape_c, dzero], [(dshape_name, i64, [len(shape)])],
                     name=site.name(f"{dshape_name}__add")).outputs[0]
    view = ed.node("Reshape", [payload, dshape], [(view_name, f16, shape)],
                   name=site.name(f"{view_name}__reshape")).outputs[0]
    decoder = ed.node("Cast", [view], [(decoded_name, f32, shape)], to=ir.DataType.FLOAT, name=decoder_name)
    _insert_decoder(site, since, first, bwd_readers, source, decoder.outputs[0])
    nbytes = 2 * numel(shape)
    return {
        "tensor": enc.source, "encoded_tensor": enc.target, "pattern": stash.pattern,
        "encoding": pass_.encoding, "codec": enc.codec, "native": enc.native, "params": enc.params,
        "shape": shape, "original_bytes": stash.nbytes, "predicted_bytes": nbytes,
        "payload": {payload_name: nbytes}, "encoder": clip.name, "decoder": decoder.name, "note": enc.note,
    }


def _static_numel(site: _Site, name: str) -> int:
    _, shape = site.type_of(name)
    if shape is None or any(not isinstance(d, int) for d in shape):
        raise ValueError(f"{name}: static shape needed for an l2 trigger")
    return numel(shape)


def _merge_plan_metadata(model: ir.Model, records: list[PassRecord]) -> None:
    """Predicted payload sizes ride along in the model so later analysis can size data-dependent payloads."""
    for r in records:
        merge_size_hints(model.metadata_props, r["payload"])
