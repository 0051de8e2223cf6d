import json, sys, warnings
warnings.simplefilter("ignore")
import onnx, numpy as np
from onnxcomp.custom_ops.contract import codec_op
rows = []
for f in sys.argv[1:]:
    d = json.load(open(f)); art = d["art"]
    info = {}
    for g, recs in d["profiles"].items():
        m = onnx.load(f"{art}/{g}", load_external_data=False)
        py = sum(codec_op(n.domain, n.op_type) is not None for n in m.graph.node)
        info[g] = (len(m.graph.node), py)
    b = [r["nt"] for r in d["profiles"]["training_model.onnx"]]
    bo = np.mean([x["overhead_seconds"] for x in b]); bn, bp = info["training_model.onnx"]
    for g, recs in d["profiles"].items():
        for r in recs:
            nt = r["nt"]; n, p = info[g]
            ran = sum(1 for v in nt["times"].values() if v > 0)
            rows.append((f.split('/')[-1], g, n - bn, p, nt["overhead_seconds"] - bo, nt["overhead_seconds"], nt["step_seconds"]))
            print(f"{f.split('/')[-1]:18s} {g:22s} dnodes {n-bn:5d} pyops {p:4d} ovh {nt['overhead_seconds']*1e3:6.1f} ms d {1e3*(nt['overhead_seconds']-bo):+6.1f} step {nt['step_seconds']:.3f}")
r = np.array([(x[2], x[3], x[4]) for x in rows if x[1] != "training_model.onnx"])
X = np.column_stack([r[:, 0], r[:, 1]]); y = r[:, 2]
c, *_ = np.linalg.lstsq(X, y, rcond=None); print("per node µs, per pyop µs:", c * 1e6)
c1, *_ = np.linalg.lstsq(r[:, :1], y, rcond=None); print("per node only µs:", c1 * 1e6)
c2, *_ = np.linalg.lstsq(r[:, 1:2], y, rcond=None); print("per pyop only µs:", c2 * 1e6)
