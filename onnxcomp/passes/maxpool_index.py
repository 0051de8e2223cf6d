"""Pass: hold MaxPool's int64 argmax indices as in-window offsets of ⌈log2(kh·kw)⌉ bits.

Native form (the default where it applies, ``native_pool_problem``): the offsets are computed and expanded back
by standard ONNX ops (Mod, Sub, Gather, MatMulInteger; Cast, Gather, Add), 4 bits per index where the window has
at most 15 taps (two codes per byte, as the PyOp's bit stream for a 3×3 window), else one uint8, no PyOp. The PyOp bridge copies
its int64 input into a fresh NumPy array and produces its int64 output as one: 8 bytes per index outside ORT's
memory pattern, on top of the pattern's block under ORT's default settings (ResNet-18 b32 64×64 ``auto --exact``:
the stem encoder's 4 MiB input copy was the step's high-water mark, the decoder's 4 MiB output the next one;
docs/notes/sidebyside.md §3). The native ops' int64 temporaries are ordinary tensors ORT plans in its pattern.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from onnx import helper

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import MAXPOOL_INDEX
from .encode_stash import (NATIVE_ENCODER_SUFFIX, EncodeStashPass, Encoding, _anchor_forward, _backward_entry,
                           _insert_decoder, _pack_bytes, _Site)

# The native encoder's code for an index outside its window (ORT's sentinel for a window of NaN/-inf only): one
# past every decode table's rows, so the decoding Gather fails loudly instead of returning a wrong index. Packed
# codes (``_packs``) use the tap count itself (< 16), which is past the table's rows too.
_INVALID = 255
# Two 4-bit codes per byte: element 2k in the low nibble of byte k, 2k + 1 in the high one (the PyOp codec's
# little-endian stream for 4 bits per index); the MatMulInteger weights and the unpacking table.
_NIBBLE_WEIGHTS = np.array([[1], [16]], dtype=np.uint8)
_NIBBLES = np.stack([np.arange(256) & 15, np.arange(256) >> 4], axis=1).astype(np.int32)


def _packs(taps: int, n: int) -> bool:
    """Whether codes of a ``taps``-tap window over ``n`` indices go two per byte (an invalid code must fit too)."""
    return taps < 16 and n % 2 == 0


def native_pool_problem(params: dict[str, Any]) -> str | None:
    """Why the native ops cannot hold this pool's indices, or None. They need every window to hold at least one
    input element (ceil_mode 0: ORT's index for a window wholly in the padding is a sentinel outside any window)
    and at most 255 taps (uint8 codes, one value kept for "not in the window")."""
    from ..custom_ops.maxpool_index import cached_geometry

    g = cached_geometry(params)
    if g.ceil_mode:
        return "ceil_mode=1: windows wholly in the padding carry ORT's sentinel index"
    if g.kh * g.kw >= _INVALID:
        return f"{g.kh * g.kw} taps per window: above a uint8 code"
    if max(g.pt, g.pb) >= g.kh or max(g.pl, g.pr) >= g.kw:
        return "a pad as large as the kernel: a window may lie wholly in the padding"
    return None


def pool_tables(params: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The native form's constants for a pool: ``origin`` int64 [OH, OW], the flat in-plane index (h·W + w) of
    each window's tap (0, 0), padding included (may be negative); ``plane`` int64 [N, C, 1, 1], each plane's
    first flat index ((n·C + c)·H·W); ``encode`` uint8 [L], the code (i·kw + j) of each in-plane offset
    i·dh·W + j·dw from the origin (elsewhere an invalid code: kh·kw where codes are packed, else 255); ``decode``
    int64 [kh·kw], that offset per code.
    Index = plane + origin + decode[code], exactly ((n·C + c)·H + h)·W + w."""
    from ..custom_ops.maxpool_index import cached_geometry

    g = cached_geometry(params)
    oh, ow = np.arange(g.OH, dtype=np.int64), np.arange(g.OW, dtype=np.int64)
    origin = (oh[:, None] * g.sh - g.pt) * g.W + (ow[None, :] * g.sw - g.pl)
    plane = (np.arange(g.N * g.C, dtype=np.int64) * g.H * g.W).reshape(g.N, g.C, 1, 1)
    i, j = np.meshgrid(np.arange(g.kh, dtype=np.int64), np.arange(g.kw, dtype=np.int64), indexing="ij")
    decode = (i * g.dh * g.W + j * g.dw).reshape(-1)
    invalid = g.kh * g.kw if _packs(g.kh * g.kw, g.N * g.C * g.OH * g.OW) else _INVALID
    encode = np.full(int(decode.max()) + 1, invalid, dtype=np.uint8)
    encode[decode] = np.arange(g.kh * g.kw, dtype=np.uint8)
    return origin, plane, encode, decode


class MaxPoolIndexPass(EncodeStashPass):
    name = "maxpool_index"
    encoding = MAXPOOL_INDEX

    def __init__(self, native: bool = True) -> None:
        # ``native``: standard ops instead of the maxpool_index PyOps where the pool allows it (module docstring).
        self.native = native

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        from ..custom_ops.maxpool_index import geometry

        pool = analysis.model.graph.node[stash.producer]
        attrs = {a.name: helper.get_attribute_value(a) for a in pool.attribute}
        x = analysis.tensors[pool.input[0]]
        if x.shape is None or len(x.shape) != 4:
            return f"pool input shape {x.shape} is not a resolved NCHW shape"
        params = {
            "input_shape": list(x.shape),
            "kernel_shape": list(attrs["kernel_shape"]),
            "strides": list(attrs.get("strides", [1, 1])),
            "pads": list(attrs.get("pads", [0, 0, 0, 0])),
            "dilations": list(attrs.get("dilations", [1, 1])),
            "ceil_mode": int(attrs.get("ceil_mode", 0)),
            "storage_order": int(attrs.get("storage_order", 0)),
            "auto_pad": attrs.get("auto_pad", b"NOTSET").decode()
            if isinstance(attrs.get("auto_pad"), bytes) else str(attrs.get("auto_pad", "NOTSET")),
        }
        try:
            g = geometry(**params)
        except ValueError as exc:
            return str(exc)
        if stash.shape is not None and tuple(stash.shape) != g.out_shape:
            return f"index shape {stash.shape} != {g.out_shape} computed from the pool's attributes"
        n = g.N * g.C * g.OH * g.OW
        if self.native and native_pool_problem(params) is None:
            held = n // 2 if _packs(g.kh * g.kw, n) else n
            return Encoding(stash.name, stash.name, pool.output[0], "maxpool_index", params, [held],
                            [[held, 1] if held < n else list(g.out_shape)],
                            f"{8 * held // n} bits per index (window {g.kh}×{g.kw}; native: Mod, Sub, Gather"
                            f"{', MatMulInteger' if held < n else ''} encode, Gather, Add decode)", native="maxpool")
        packed = (n * g.bits + 7) // 8
        # The indices have no forward reader; the pooled values (output 0) do, so they carry the anchor.
        # The int64 shape payload is declared with a symbolic length (see signbits._payload_shapes: two static
        # int64[4] outputs per encoder abort ORT's memory-reuse planner).
        return Encoding(stash.name, stash.name, pool.output[0], "maxpool_index", params, [packed, 32],
                        [[packed], None], f"{g.bits} bits per index (window {g.kh}×{g.kw})")


def encode_native_pool(site: _Site, stash: StashedTensor, enc: Encoding, pass_: EncodeStashPass) -> dict[str, Any]:
    """MaxPool's indices as one uint8 code per index with standard ops, no PyOp (``pool_tables`` has the
    arithmetic):

    encode (after the pool): ``Gather(encode, Mod(index, H·W) − origin)``: uint8 [N, C, OH, OW], packed two a
    byte by MatMulInteger where the codes have 4 bits (``_packs``: payload uint8 [n/2, 1]); the pooled
    values' forward readers read ``Reshape(pooled, shape + zero(code))``, so the encoder runs in the forward
    pass under either execution order and the int64 indices are freed there;
    decode (before the first backward reader, waiting on its dY; packed codes unpacked by a Gather from a
    [256, 2] table first): ``Gather(decode, Cast(code, int32)) + origin
    + plane`` in [N·C, OH·OW], viewed as [N, C, OH, OW]: the int64 indices, bit for bit."""
    ed, values = site.editor, site.values
    u8, i32, i64 = ir.DataType.UINT8, ir.DataType.INT32, ir.DataType.INT64
    from ..custom_ops.maxpool_index import cached_geometry

    g = cached_geometry(enc.params)
    base = enc.source.replace("/", "_").strip("_")
    shape = list(g.out_shape)
    if stash.shape is not None and list(stash.shape) != shape:
        raise ValueError(f"{enc.source}: index shape {list(stash.shape)} != {shape} (select() must not choose it)")
    origin, plane, enc_lut, dec_lut = pool_tables(enc.params)
    key = "x".join(map(str, [g.N, g.C, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.dh, g.dw]))
    origin_c = ed.shared_tensor(f"onnxcomp_pool_origin_{key}", origin)
    enc_c = ed.shared_tensor(f"onnxcomp_pool_encode_{key}", enc_lut)
    dec_c = ed.shared_tensor(f"onnxcomp_pool_decode_{key}", dec_lut)
    hw = ed.shared_tensor(f"onnxcomp_i64_{g.H * g.W}", np.array(g.H * g.W, dtype=np.int64))
    shape_c = ed.shared_const(f"onnxcomp_shape_{'x'.join(map(str, shape))}", shape, [len(shape)])
    gate = values[enc.gate]
    readers = site.forward_readers(gate)     # before the encoder exists
    since = len(ed.nodes)
    first_name = site.name(f"{base}__pool_inplane{NATIVE_ENCODER_SUFFIX}")
    inplane = ed.node("Mod", [values[enc.target], hw], [(site.name(f"{base}__pool_inplane"), i64, shape)],
                      name=first_name, fmod=0).outputs[0]
    offset = ed.node("Sub", [inplane, origin_c], [(site.name(f"{base}__pool_offset"), i64, shape)],
                     name=site.name(f"{base}__pool_offset__sub")).outputs[0]
    n = numel(shape)
    packs = _packs(g.kh * g.kw, n)
    payload_name = site.name(f"{base}__pool_p0")
    code_name = site.name(f"{base}__pool_codes") if packs else payload_name
    payload = ed.node("Gather", [enc_c, offset], [(code_name, u8, shape)], axis=0,
                      name=site.name(f"{base}__encode_pool_gather")).outputs[0]
    if packs:   # two codes a byte: [n/2, 2] · [1, 16]ᵀ (as the native sign bits pack 8)
        pairs_c = ed.shared_const(f"onnxcomp_shape_{n // 2}x2", [n // 2, 2], [2])
        weights = ed.shared_tensor("onnxcomp_nibble_weights", _NIBBLE_WEIGHTS)
        payload = _pack_bytes(site, payload, pairs_c, [n // 2, 2], weights, payload_name, base, "pool", "pairs")
    _anchor_forward(site, enc, gate, readers, payload, shape_c, len(shape), f"{base}__pool_anchor", since)
    source = values[enc.source]
    bwd_readers, first, d_y_name = _backward_entry(site, enc)
    # The decode computes in [N·C, OH·OW], not the indices' own shape: ORT gives a new tensor the most recently
    # freed buffer of the same element size and shape and holds a buffer as one interval, first tensor to last
    # read (planner/ort_pattern.py), so an int64 [N, C, OH, OW] here would take the encoder's freed buffer and
    # keep its 8 bytes per index in the pattern block across the whole step (ResNet-18: P +1 MiB). The last
    # Reshape is a view (ORT aliases it).
    flat = [g.N * g.C, g.OH * g.OW]
    flat_c = ed.shared_const(f"onnxcomp_shape_{'x'.join(map(str, flat))}", flat, [2])
    origin_f = ed.shared_tensor(f"onnxcomp_pool_origin_flat_{key}", origin.reshape(1, -1))
    plane_f = ed.shared_tensor(f"onnxcomp_pool_plane_flat_{key}", plane.reshape(-1, 1))
    since = len(ed.nodes)
    dzero = ed.zero_after(values[d_y_name], site.type_of(d_y_name)[0], base=f"{base}__pool_trigger")
    held_c = ed.shared_const(f"onnxcomp_shape_{n // 2}", [n // 2], [1]) if packs else flat_c
    dshape = ed.node("Add", [held_c, dzero], [(site.name(f"{base}__pool_shape"), i64, [1 if packs else 2])],
                     name=site.name(f"{base}__pool_shape__add")).outputs[0]
    held = [n // 2] if packs else flat
    view = ed.node("Reshape", [payload, dshape], [(site.name(f"{base}__pool_gated"), u8, held)],
                   name=site.name(f"{base}__pool_gated__reshape")).outputs[0]
    code = ed.node("Cast", [view], [(site.name(f"{base}__pool_code"), i32, held)], to=i32,
                   name=site.name(f"{base}__pool_code__cast")).outputs[0]
    if packs:   # byte v → its two codes (v & 15, v >> 4), element 2k first: [n/2, 2], then a view as [N·C, OH·OW]
        nibbles = ed.shared_tensor("onnxcomp_nibbles_i32", _NIBBLES)
        pair = ed.node("Gather", [nibbles, code], [(site.name(f"{base}__pool_unpacked"), i32, [n // 2, 2])],
                       axis=0, name=site.name(f"{base}__pool_unpack")).outputs[0]
        code = ed.node("Reshape", [pair, flat_c], [(site.name(f"{base}__pool_code_flat"), i32, flat)],
                       name=site.name(f"{base}__pool_code_flat__reshape")).outputs[0]
    step = ed.node("Gather", [dec_c, code], [(site.name(f"{base}__pool_step"), i64, flat)], axis=0,
                   name=site.name(f"{base}__pool_step__gather")).outputs[0]
    inplane_d = ed.node("Add", [step, origin_f], [(site.name(f"{base}__pool_inplane_d"), i64, flat)],
                        name=site.name(f"{base}__pool_inplane_d__add")).outputs[0]
    index_f = ed.node("Add", [inplane_d, plane_f], [(site.name(f"{base}__pool_index_flat"), i64, flat)],
                      name=site.name(f"{base}__pool_index_flat__add")).outputs[0]
    decoded_name = site.name(f"{base}__decoded")
    decoder = ed.node("Reshape", [index_f, shape_c], [(decoded_name, i64, shape)],
                      name=site.name(f"{base}__decode_pool"))
    _insert_decoder(site, since, first, bwd_readers, source, decoder.outputs[0])
    nbytes = n // 2 if packs else n
    return {
        "tensor": enc.source, "encoded_tensor": enc.target, "pattern": stash.pattern,
        "encoding": pass_.encoding, "codec": enc.codec, "native": enc.native, "params": enc.params,
        "shape": shape, "original_bytes": stash.nbytes, "predicted_bytes": nbytes,
        "payload": {payload_name: nbytes}, "encoder": first_name, "decoder": decoder.name, "note": enc.note,
    }
