"""Per-call overhead of onnxcomp's PyOps: what a codec call costs inside ONNX Runtime beyond the codec.

Three one-node graphs on the same input, timed with ``InferenceSession.run`` (median of ``--repeat``):
``Identity`` (ORT's own per-run cost and output copy), ``OnnxcompEncode_signbits`` / ``OnnxcompDecode_signbits``
(the PyOp bridge: input copy into a fresh NumPy array, the Python hook, attribute parsing, the codec, output
memcpy), against the op's Python function called directly (params lookup, framing, the codec), the codec alone,
framing / unframing alone, and a copy of the input into a fresh array (what the bridge does per call). Op
minus Python function minus Identity is the C++ bridge's own overhead. Run it under measure's allocator too
(``MALLOC_MMAP_THRESHOLD_=131072``), where every fresh array of 128 KiB or more is page-faulted anew.

    .venv/bin/python tools/bench_pyop.py --sizes 1 262144 2097152
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Callable

import numpy as np


def _median_s(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _session(node: Any, inputs: list[Any], outputs: list[Any]) -> Any:
    import onnxruntime as ort
    from onnx import helper

    from onnxcomp.runtime import session_options

    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.contrib", 1)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])


def measure(n: int, repeat: int) -> dict[str, float]:
    from onnx import TensorProto, helper

    from onnxcomp.custom_ops import get_codec
    from onnxcomp.runtime.codec_ops import PARAMS_ATTR, op_type_names

    codec = get_codec("signbits")
    enc_type, dec_type = op_type_names("signbits")
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    f = lambda name, t, shape: helper.make_tensor_value_info(name, t, shape)  # noqa: E731
    ident = _session(helper.make_node("Identity", ["X"], ["Y"]), [f("X", TensorProto.FLOAT, [n])],
                     [f("Y", TensorProto.FLOAT, [n])])
    enc = _session(helper.make_node(enc_type, ["X"], ["bits", "shape", "anchor"], domain="ai.onnx.contrib",
                                    **{PARAMS_ATTR: "{}"}),
                   [f("X", TensorProto.FLOAT, [n])],
                   [f("bits", TensorProto.UINT8, None), f("shape", TensorProto.INT64, None),
                    f("anchor", TensorProto.INT64, None)])
    from onnxcomp.runtime import codec_ops, framing

    bits, shape = codec.encode_cpu(x)
    enc_fn, dec_fn = codec_ops._make_encode(codec), codec_ops._make_decode(codec)
    attrs = {PARAMS_ATTR: "{}"}
    framed = enc_fn(x, **attrs)  # what the decode op is fed: the payload with its framed shape array
    dec = _session(helper.make_node(dec_type, ["bits", "shape", "trigger"], ["Y"], domain="ai.onnx.contrib",
                                    **{PARAMS_ATTR: "{}"}),
                   [f("bits", TensorProto.UINT8, [bits.size]), f("shape", TensorProto.INT64, [framed[1].size]),
                    f("trigger", TensorProto.FLOAT, [1])],
                   [f("Y", TensorProto.FLOAT, None)])
    trigger = np.zeros(1, np.float32)
    # The Python op functions the hook calls (params lookup, framing, the codec, contiguity checks), without
    # the C++ bridge: the rest of "op - Identity" is the bridge (input copy into a fresh array, output memcpy).
    fresh_x = lambda: np.empty_like(x)  # noqa: E731  (what the bridge allocates per call for the input)
    return {
        "encode_fn_us": 1e6 * _median_s(lambda: enc_fn(x, **attrs), repeat),
        "decode_fn_us": 1e6 * _median_s(lambda: dec_fn(*framed[:2], trigger, **attrs), repeat),
        "frame_us": 1e6 * _median_s(lambda: framing.frame(codec, (bits, shape)), repeat),
        "unframe_us": 1e6 * _median_s(lambda: framing.unframe(codec, framed[:2]), repeat),
        "fresh_input_copy_us": 1e6 * _median_s(lambda: np.copyto(fresh_x(), x), repeat),
        "n": n,
        "identity_us": 1e6 * _median_s(lambda: ident.run(None, {"X": x}), repeat),
        "encode_op_us": 1e6 * _median_s(lambda: enc.run(None, {"X": x}), repeat),
        "encode_direct_us": 1e6 * _median_s(lambda: codec.encode_cpu(x), repeat),
        "decode_op_us": 1e6 * _median_s(lambda: dec.run(None, {"bits": bits, "shape": framed[1], "trigger": trigger}),
                                        repeat),
        "decode_direct_us": 1e6 * _median_s(lambda: codec.decode_cpu((bits, shape)), repeat),
        "copy_us": 1e6 * _median_s(lambda: x.copy(), repeat),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 262144, 2097152], help="float32 elements")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    print("| elements | Identity run | encode op | encode fn (Python op body) | encode codec | framing "
          "| bridge (op − fn − Identity) | fresh input copy | decode op | decode fn | decode codec | unframe "
          "| decode bridge (op − fn) | x.copy() |")
    print("|---:|" + "---:|" * 13)
    for n in args.sizes:
        r = measure(n, args.repeat)
        bridge = r["encode_op_us"] - r["encode_fn_us"] - r["identity_us"]
        dbridge = r["decode_op_us"] - r["decode_fn_us"]
        print(f"| {n} | {r['identity_us']:.1f} µs | {r['encode_op_us']:.1f} µs | {r['encode_fn_us']:.1f} µs "
              f"| {r['encode_direct_us']:.1f} µs | {r['frame_us']:.1f} µs | {bridge:.1f} µs "
              f"| {r['fresh_input_copy_us']:.1f} µs | {r['decode_op_us']:.1f} µs | {r['decode_fn_us']:.1f} µs "
              f"| {r['decode_direct_us']:.1f} µs | {r['unframe_us']:.1f} µs | {dbridge:.1f} µs "
              f"| {r['copy_us']:.1f} µs |")
    print(f"\nload average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
