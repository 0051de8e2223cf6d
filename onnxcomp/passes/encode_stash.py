"""Shared machinery of the encoding passes: encode a stash after its producer, decode it just in time.

Execution order is what makes or breaks the saving (platform notes): an encoder that only a backward
decoder consumes would run in the backward pass under ORT's default order, keeping the activation alive.
So every encoder also emits its input's shape (``anchor``) and the forward consumers of a *gate* tensor read
``Reshape(gate, anchor)`` (a zero-copy view) — they cannot run before the encoder, under either order.
A decoder takes one element of its backward consumer's incoming gradient dY as an extra input, so it cannot
run before that gradient exists, i.e. just before the consumer; it sits right before it in node order too.
"""
from __future__ import annotations

import json
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..analysis import GraphAnalysis, StashedTensor, analysis_of, numel
from ..custom_ops import checked_params, contract
from ..custom_ops.contract import decode_op as decode_op_type, encode_op as encode_op_type  # noqa: F401
from .records import PassRecord
from .base import (PLAN_METADATA_KEY, GraphPass, PassResult, Skipped, declare_custom_ops,
                   taken_names, trigger_constants, unique_name, zero_after)


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
    # bit-identical to the dpr_fp16 codec except that ±Inf saturates too.
    native: str | None = None


# Node-name suffix of a native encoder's first node: how later passes tell the stash is already taken.
NATIVE_ENCODER_SUFFIX = "__native_encode"
_FP16_MAX = 65504.0


class EncodeStashPass(GraphPass):
    """Base of the one-encoding-per-module passes: subclasses only choose tensors and codec params."""

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

    def payload_types(self, codec: str) -> list[int]:
        from ..custom_ops import get_codec

        return [helper.np_dtype_to_tensor_dtype(np.dtype(d)) for d in get_codec(codec).payload_dtypes]

    def run(self, model: onnx.ModelProto) -> PassResult:
        analysis = analysis_of(model)
        result = PassResult(self.copy(model))
        choices: list[tuple[StashedTensor, Encoding]] = []
        for stash in analysis.stashed:
            if not self.applies(stash) or (self.only is not None and stash.name not in self.only):
                continue
            if already_encoded(analysis, stash.name) and not self.encodes_remaining_readers:
                continue
            chosen = self.overrides.get(stash.pattern)
            if chosen is not None and chosen != self.encoding:
                result.skipped.append(Skipped(stash.name, stash.pattern, f"config assigns this pattern to {chosen!r}"))
                continue
            if analysis.incoming_gradient(min(stash.backward_consumers), stash.name) is None:
                result.skipped.append(Skipped(stash.name, stash.pattern, "its first backward reader has no "
                                              "incoming gradient to time a decoder by"))
                continue
            choice = self.select(analysis, stash)
            if isinstance(choice, str):
                result.skipped.append(Skipped(stash.name, stash.pattern, choice))
            else:
                choices.append((stash, choice))
        if choices:
            _Rewriter(result.model, analysis).apply(choices, self, result)
        return result


def already_encoded(analysis: GraphAnalysis, name: str) -> bool:
    t = analysis.tensors[name]
    nodes = analysis.model.graph.node
    return any(contract.is_encoder(nodes[c].domain, nodes[c].op_type)
               or nodes[c].name.endswith(NATIVE_ENCODER_SUFFIX) for c in t.consumers)


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, analysis: GraphAnalysis) -> None:
        self.model = model
        self.graph = model.graph
        self.analysis = analysis
        self.nodes = list(self.graph.node)           # same objects as in the graph, order editable
        self.backward_ids = {id(self.nodes[i]) for i in analysis.boundary.backward}
        self.encoder_ids: set[int] = set()
        self.taken = taken_names(self.graph)
        self.value_info: list[onnx.ValueInfoProto] = []

    def _index(self, node: onnx.NodeProto) -> int:
        for i, n in enumerate(self.nodes):
            if n is node:
                return i
        raise KeyError(node.name)

    def _producer(self, tensor: str) -> onnx.NodeProto:
        for n in self.nodes:
            if tensor in n.output:
                return n
        raise KeyError(tensor)

    def _type(self, name: str) -> tuple[int, list[int] | None]:
        t = self.analysis.tensors[name].type
        return helper.np_dtype_to_tensor_dtype(t.dtype), (list(t.shape) if t.shape is not None else None)

    def apply(self, choices: list[tuple[StashedTensor, Encoding]], pass_: EncodeStashPass,
              result: PassResult) -> None:
        declare_custom_ops(self.model)
        for stash, enc in choices:
            result.records.append(PassRecord("encoded", pass_.name, enc.source, self._encode_one(stash, enc, pass_)))
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)
        self.graph.value_info.extend(self.value_info)
        _merge_plan_metadata(self.model, result.records)

    def _encode_one(self, stash: StashedTensor, enc: Encoding, pass_: EncodeStashPass) -> dict[str, Any]:
        if enc.native is not None:
            return self._encode_native(stash, enc, pass_)
        base = enc.source.replace("/", "_").strip("_")
        payload_types = pass_.payload_types(enc.codec)
        payload = [unique_name(f"{base}__{enc.codec}_p{k}", self.taken) for k in range(len(payload_types))]
        anchor = unique_name(f"{base}__{enc.codec}_anchor", self.taken)
        enc.params = checked_params(enc.codec, enc.params, enc.source)
        params = contract.params_value(enc.params)

        # Encoder right after the target's producer; then the gate's forward readers wait on it.
        encoder = helper.make_node(encode_op_type(enc.codec), [enc.target], [*payload, anchor],
                                   name=unique_name(f"{base}__encode_{enc.codec}", self.taken),
                                   domain=contract.DOMAIN, **{contract.PARAMS_ATTR: params})
        self.encoder_ids.add(id(encoder))
        producer = self._producer(enc.target)
        pos = self._index(producer) + 1
        self.nodes.insert(pos, encoder)
        gated = unique_name(f"{enc.gate.replace('/', '_').strip('_')}__anchored", self.taken)
        readers = [n for n in self.nodes if id(n) not in self.backward_ids and id(n) not in self.encoder_ids
                   and enc.gate in n.input]
        if readers:
            reshape = helper.make_node("Reshape", [enc.gate, anchor], [gated],
                                       name=unique_name(f"{gated}__reshape", self.taken))
            self.nodes.insert(pos + 1, reshape)
            for n in readers:
                for k, i in enumerate(n.input):
                    if i == enc.gate:
                        n.input[k] = gated
            elem, shape = self._type(enc.gate)
            self.value_info.append(helper.make_tensor_value_info(gated, elem, shape))
        # Decoder just before the first backward reader, triggered by one element of that reader's dY.
        # (Shape(dY) would not do: ORT folds the Shape of a statically shaped tensor into a constant, and
        # the decoder then runs in the forward pass.)
        bwd_readers = [n for n in self.nodes if id(n) in self.backward_ids and enc.source in n.input
                       and (enc.readers is None or n.op_type in enc.readers)]
        first = min(bwd_readers, key=self._index)
        d_y = self.analysis.incoming_gradient(first, enc.source)
        decoded = unique_name(f"{base}__decoded", self.taken)
        trigger = unique_name(f"{base}__{enc.codec}_trigger", self.taken)
        flat = unique_name(f"{trigger}_flat", self.taken)
        start, end, minus_one = self._trigger_constants()
        if enc.trigger == "l2":
            new_nodes = [
                helper.make_node("ReduceL2", [d_y], [flat], keepdims=1,
                                 name=unique_name(f"{flat}__reducel2", self.taken)),
                helper.make_node("Reshape", [flat, minus_one], [trigger],
                                 name=unique_name(f"{trigger}__reshape", self.taken)),
            ]
            enc.params = {**enc.params, "dy_numel": self._numel(d_y)}
            params = contract.params_value(enc.params)
        elif enc.trigger == "element":
            new_nodes = [
                helper.make_node("Reshape", [d_y, minus_one], [flat], name=unique_name(f"{flat}__reshape", self.taken)),
                helper.make_node("Slice", [flat, start, end], [trigger], name=unique_name(f"{trigger}__slice", self.taken)),
            ]
        else:
            raise ValueError(f"unknown decoder trigger {enc.trigger!r}")
        decoder = helper.make_node(decode_op_type(enc.codec), [*payload, trigger], [decoded],
                                   name=unique_name(f"{base}__decode_{enc.codec}", self.taken),
                                   domain=contract.DOMAIN, **{contract.PARAMS_ATTR: params})
        new_nodes.append(decoder)
        at = self._index(first)
        for k, n in enumerate(new_nodes):
            self.nodes.insert(at + k, n)
            self.backward_ids.add(id(n))
        self.value_info.append(helper.make_tensor_value_info(trigger, TensorProto.FLOAT, [None]))
        for n in bwd_readers:
            for k, i in enumerate(n.input):
                if i == enc.source:
                    n.input[k] = decoded

        # Types: payload (shape known when the codec's size is), anchor, decoded.
        from ..custom_ops import get_codec as _codec

        framed = [n == "shape" for n in _codec(enc.codec).payload_names]  # runtime/framing.py appends words
        for name, elem, shp, fr in zip(payload, payload_types, enc.payload_shapes or [None] * len(payload), framed):
            shp = None if fr else shp  # a declared [ndim] breaks ORT's buffer reuse (mem pattern/reuse on)
            self.value_info.append(helper.make_tensor_value_info(name, elem, shp if shp is not None else
                                                                 [f"{name}_len"]))
        src_elem, src_shape = self._type(enc.source)
        tgt_elem, tgt_shape = self._type(enc.target)
        self.value_info.append(helper.make_tensor_value_info(anchor, TensorProto.INT64,
                                                             [len(tgt_shape)] if tgt_shape else None))
        from ..custom_ops import get_codec

        out_elem = helper.np_dtype_to_tensor_dtype(np.dtype(get_codec(enc.codec).output_dtype))
        self.value_info.append(helper.make_tensor_value_info(decoded, out_elem, src_shape))
        predicted = sum(b for b in enc.payload_bytes if b is not None) if enc.payload_bytes else None
        return {
            "tensor": enc.source, "encoded_tensor": enc.target, "pattern": stash.pattern,
            "encoding": pass_.encoding, "codec": enc.codec, "params": enc.params,
            "shape": list(stash.shape) if stash.shape else None, "original_bytes": stash.nbytes,
            "predicted_bytes": predicted, "payload": dict(zip(payload, enc.payload_bytes)),
            "encoder": encoder.name, "decoder": decoder.name, "note": enc.note,
        }

    def _zero_from(self, tensor: str, elem: int, base: str, to_float: bool) -> tuple[list[onnx.NodeProto], str]:
        nodes, infos, zero = zero_after(self.graph, tensor, elem, base, self.taken, to_float=to_float)
        self.value_info += infos
        return nodes, zero

    def _const(self, name: str, elem: int, dims: list[int], values: list[float | int]) -> str:
        if not any(i.name == name for i in self.graph.initializer):
            self.graph.initializer.append(helper.make_tensor(name, elem, dims, values))
            self.taken.add(name)
        return name

    def _encode_native(self, stash: StashedTensor, enc: Encoding, pass_: EncodeStashPass) -> dict[str, Any]:
        """Clip + Cast to float16 after the producer; Cast back just before the first backward reader.

        Same timing guarantees as the PyOp path, with standard ops: the gate's forward readers read
        ``Reshape(gate, shape + zero(payload))`` and the decoding Cast reads ``Reshape(payload, shape +
        zero(dY))`` (zero-copy views; see _zero_from)."""
        if enc.native != "fp16":
            raise ValueError(f"unknown native encoding {enc.native!r}")
        base = enc.source.replace("/", "_").strip("_")
        shape = list(stash.shape)
        shape_c = self._const(f"onnxcomp_shape_{'x'.join(map(str, shape)) or 'scalar'}", TensorProto.INT64,
                              [len(shape)], shape)
        lo = self._const("onnxcomp_fp16_min", TensorProto.FLOAT, [], [-_FP16_MAX])
        hi = self._const("onnxcomp_fp16_max", TensorProto.FLOAT, [], [_FP16_MAX])
        clipped, payload = (unique_name(f"{base}__fp16_{s}", self.taken) for s in ("clipped", "p0"))
        encoder = [helper.make_node("Clip", [enc.target, lo, hi], [clipped],
                                    name=unique_name(f"{base}{NATIVE_ENCODER_SUFFIX}", self.taken)),
                   helper.make_node("Cast", [clipped], [payload], to=TensorProto.FLOAT16,
                                    name=unique_name(f"{base}__encode_fp16_cast", self.taken))]
        gate_nodes, zero = self._zero_from(payload, TensorProto.FLOAT16, f"{base}__fp16_anchor", to_float=True)
        anchor = unique_name(f"{base}__fp16_anchor", self.taken)
        gate_nodes.append(helper.make_node("Add", [shape_c, zero], [anchor], name=unique_name(f"{anchor}__add", self.taken)))
        self.encoder_ids.update(id(n) for n in encoder + gate_nodes)
        pos = self._index(self._producer(enc.target)) + 1
        readers = [n for n in self.nodes if id(n) not in self.backward_ids and id(n) not in self.encoder_ids
                   and enc.gate in n.input]
        new_fwd = encoder + (gate_nodes if readers else [])
        if readers:
            gated = unique_name(f"{enc.gate.replace('/', '_').strip('_')}__anchored", self.taken)
            new_fwd.append(helper.make_node("Reshape", [enc.gate, anchor], [gated],
                                            name=unique_name(f"{gated}__reshape", self.taken)))
            for n in readers:
                n.input[:] = [gated if i == enc.gate else i for i in n.input]
            elem, gshape = self._type(enc.gate)
            self.value_info.append(helper.make_tensor_value_info(gated, elem, gshape))
            self.value_info.append(helper.make_tensor_value_info(anchor, TensorProto.INT64, [len(shape)]))
        for k, n in enumerate(new_fwd):
            self.nodes.insert(pos + k, n)
            self.encoder_ids.add(id(n))

        bwd_readers = [n for n in self.nodes if id(n) in self.backward_ids and enc.source in n.input
                       and (enc.readers is None or n.op_type in enc.readers)]
        first = min(bwd_readers, key=self._index)
        d_y = self.analysis.incoming_gradient(first, enc.source)
        dec_nodes, dzero = self._zero_from(d_y, self._type(d_y)[0], f"{base}__fp16_trigger", to_float=False)
        dshape, view, decoded = (unique_name(f"{base}__{s}", self.taken) for s in ("fp16_shape", "fp16_gated", "decoded"))
        decoder = helper.make_node("Cast", [view], [decoded], to=TensorProto.FLOAT,
                                   name=unique_name(f"{base}__decode_fp16_cast", self.taken))
        dec_nodes += [helper.make_node("Add", [shape_c, dzero], [dshape], name=unique_name(f"{dshape}__add", self.taken)),
                      helper.make_node("Reshape", [payload, dshape], [view], name=unique_name(f"{view}__reshape", self.taken)),
                      decoder]
        at = self._index(first)
        for k, n in enumerate(dec_nodes):
            self.nodes.insert(at + k, n)
            self.backward_ids.add(id(n))
        for n in bwd_readers:
            n.input[:] = [decoded if i == enc.source else i for i in n.input]
        self.value_info += [helper.make_tensor_value_info(clipped, TensorProto.FLOAT, shape),
                            helper.make_tensor_value_info(payload, TensorProto.FLOAT16, shape),
                            helper.make_tensor_value_info(dshape, TensorProto.INT64, [len(shape)]),
                            helper.make_tensor_value_info(view, TensorProto.FLOAT16, shape),
                            helper.make_tensor_value_info(decoded, TensorProto.FLOAT, shape)]
        nbytes = 2 * numel(shape)
        return {
            "tensor": enc.source, "encoded_tensor": enc.target, "pattern": stash.pattern,
            "encoding": pass_.encoding, "codec": enc.codec, "native": enc.native, "params": enc.params,
            "shape": shape, "original_bytes": stash.nbytes, "predicted_bytes": nbytes,
            "payload": {payload: nbytes}, "encoder": encoder[0].name, "decoder": decoder.name, "note": enc.note,
        }

    def _numel(self, name: str) -> int:
        _, shape = self._type(name)
        if shape is None or any(not isinstance(d, int) for d in shape):
            raise ValueError(f"{name}: static shape needed for an l2 trigger")
        return numel(shape)

    def _trigger_constants(self) -> tuple[str, str, str]:
        return trigger_constants(self.graph)


def _merge_plan_metadata(model: onnx.ModelProto, records: list[PassRecord]) -> None:
    """Predicted payload sizes ride along in the model so later analysis can size data-dependent payloads."""
    existing = next((p for p in model.metadata_props if p.key == PLAN_METADATA_KEY), None)
    hints = json.loads(existing.value) if existing else {}
    for r in records:
        for name, nbytes in r["payload"].items():
            if nbytes is not None:
                hints[name] = nbytes
    if existing is None:
        existing = model.metadata_props.add()
        existing.key = PLAN_METADATA_KEY
    existing.value = json.dumps(hints, sort_keys=True)
