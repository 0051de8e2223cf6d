"""Pass: hold MaxPool's int64 argmax indices as in-window offsets of ⌈log2(kh·kw)⌉ bits."""
from __future__ import annotations

from onnx import helper

from ..analysis import GraphAnalysis, StashedTensor
from ..analysis.patterns import MAXPOOL_INDEX
from .encode_stash import EncodeStashPass, Encoding


class MaxPoolIndexPass(EncodeStashPass):
    name = "maxpool_index"
    encoding = MAXPOOL_INDEX

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
        packed = (n * g.bits + 7) // 8
        # The indices have no forward reader; the pooled values (output 0) do, so they carry the anchor.
        # The int64 shape payload is declared with a symbolic length (see signbits._payload_shapes: two static
        # int64[4] outputs per encoder abort ORT's memory-reuse planner).
        return Encoding(stash.name, stash.name, pool.output[0], "maxpool_index", params, [packed, 32],
                        [[packed], None], f"{g.bits} bits per index (window {g.kh}×{g.kw})")
