import json, time, sys, numpy as np, onnx
from onnxcomp.custom_ops import cpu, zfp
from onnxcomp.analysis import analyze_model  # noqa
m = onnx.load("/tmp/aotlossy/R20/training_model.onnx", load_external_data=False)
plan = json.load(open("/tmp/aotlossy/R20/training_model.plan.json"))
# shapes via shape inference
inf = onnx.shape_inference.infer_shapes(m)
shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in list(inf.graph.value_info) + list(inf.graph.input)}
todo = []
for n in m.graph.node:
    if n.op_type == "OnnxcompEncode_zfp":
        s = shapes.get(n.input[0])
        p = json.loads([a.s for a in n.attribute if a.name == "params"][0])
        todo.append((tuple(s), p["rate"]))
print(len(todo), todo[:5])
rng = np.random.default_rng(0)
xs = [(np.maximum(rng.standard_normal(s), 0).astype(np.float32), r) for s, r in todo]
codec = zfp.ZFP()
res = {}
for b in sys.argv[1:]:
    b, _, th = b.partition(":")
    cpu.set_backend(b)
    if th: cpu.kernels("zfp").threads = int(th)
    for x, r in xs: codec.decode_cpu(codec.encode_cpu(x, rate=r))
    best = (1e9, 1e9)
    for rep in range(5):
        t = time.perf_counter(); c = time.process_time()
        ps = [codec.encode_cpu(x, rate=r) for x, r in xs]
        te = time.perf_counter() - t; ce = time.process_time() - c
        t = time.perf_counter(); c2 = time.process_time()
        ys = [codec.decode_cpu(p) for p in ps]
        td = time.perf_counter() - t; cd = time.process_time() - c2
        best = min(best, (te + td, ce + cd))
    print(b, "all 18 enc+dec: wall %.4f s, cpu %.4f s" % best, flush=True)
