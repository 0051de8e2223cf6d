"""Forced input-channel split of a ConvGrad (dX by ConvGrad blocks): are dX, dW, dB bit-identical?"""
import sys, itertools
import numpy as np, onnx, onnx.parser, onnx.helper, onnx.shape_inference, onnxruntime as ort
import onnxcomp.passes.split_conv_grad as scg
from onnxcomp.passes.split_conv_grad import SplitConvGradPass
scg.blocks_that_pay = lambda dy, x, w, needs_dx, limit: min(int(x[1]), -(-scg._workspace(dy, w) // limit))

def graph(N, C, M, H, k, stride):
    p = k // 2
    Ho = (H + 2 * p - k) // stride + 1
    text = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
g (float[{N},{M},{Ho},{Ho}] dz, float[{N},{C},{H},{H}] x, float[{M},{C},{k},{k}] w) => (float[{N},{C},{H},{H}] dx, float[{M},{C},{k},{k}] dw, float[{M}] db)
{{
  dx, dw, db = com.microsoft.ConvGrad <pads=[{p},{p},{p},{p}], strides=[{stride},{stride}], dilations=[1,1], group=1, kernel_shape=[{k},{k}]> (dz, x, w)
}}
"""
    m = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(text))
    return m, (N, M, Ho, Ho)

def run(m, feeds, threads):
    so = ort.SessionOptions(); so.intra_op_num_threads = threads
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(["dx", "dw", "db"], feeds)

ok = True
for (N, C, M, H, k, stride) in [(8, 32, 32, 48, 3, 1), (8, 64, 64, 40, 3, 1), (8, 16, 32, 48, 3, 1),
                                (8, 32, 64, 24, 3, 1), (8, 64, 128, 20, 3, 1), (8, 3, 16, 48, 3, 1), (8, 32, 64, 48, 3, 2)]:
    m, dys = graph(N, C, M, H, k, stride)
    rng = np.random.default_rng(0)
    feeds = {"dz": rng.standard_normal(dys).astype(np.float32), "x": rng.standard_normal((N, C, H, H)).astype(np.float32),
             "w": rng.standard_normal((M, C, k, k)).astype(np.float32)}
    ws = C * k * k * dys[2] * dys[3] * 4
    for threads in (1, 2):
        ref = run(m, feeds, threads)
        for limit in (64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20):
            if ws <= limit: continue
            r = SplitConvGradPass(limit).run(m)
            if not r.records: print("no split", N, C, M, H, limit); continue
            out = run(r.model, feeds, threads)
            eq = [np.array_equal(a, b) for a, b in zip(ref, out)]
            ok &= all(eq)
            print(f"N{N} C{C} M{M} H{H} k{k} s{stride} thr{threads} ws {ws>>10}KiB limit {limit>>10}KiB blocks {r.records[0]['input_channel_blocks']}: dx,dw,db equal {eq}"
                  + ("" if all(eq) else f" maxdiff {[float(np.abs(a-b).max()) for a,b in zip(ref,out)]}"))
print("ALL EQUAL" if ok else "SOME DIFFER")
