"""Arena off, pattern on: during each PyOp call of step 1, find where each input sits in the pattern block P
(its bytes searched in the block), to compare ORT's real offsets with ort_pattern's replay."""
import os, sys, ctypes, json
import numpy as np
from pathlib import Path
d = Path(sys.argv[1]); model = d / "training_model.onnx"; out = sys.argv[2]
import onnxruntime as ort
import onnxcomp.runtime.pyops as pyops
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
ort.set_default_logger_severity(3)
LOG = os.environ["MALLOC_LOG_FILE"]
state = {"on": False, "addr": None, "P": None, "calls": []}
inner = pyops._fast_hook
def find_block():
    lines = open(LOG).read().splitlines()
    st = max(i for i, l in enumerate(lines) if l == "STEP 1")
    a = next(l for l in lines[st+1:] if l.startswith("A "))
    _, sz, ad = a.split(); return int(ad, 16), int(sz)
def hook(k_id, feed, attributes):
    if state["on"]:
        if state["addr"] is None:
            state["addr"], state["P"] = find_block()
        blk = np.frombuffer(ctypes.string_at(state["addr"], state["P"]), dtype=np.uint8)
        raw = blk.tobytes()[: state["P"] // 64 * 64]
        op = pyops.Opdef._odlist.get(k_id)
        rec = {"op": op.op_type if op else str(k_id), "inputs": []}
        for x in feed:
            a = np.ascontiguousarray(x); b = a.view(np.uint8).ravel()
            off = None
            if b.size >= 256:
                nz = np.flatnonzero(b)
                if nz.size:
                    k = int(nz[0]) // 64 * 64
                    win = b[k:k+128].tobytes()
                    pos = raw.find(win)
                    while pos >= 0:
                        o = pos - k
                        if o >= 0 and o + b.size <= len(raw) and raw[o:o+b.size] == b.tobytes():
                            off = o; break
                        pos = raw.find(win, pos + 1)
            rec["inputs"].append([int(b.size), off])
        cur = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 64)
        prev = state.get("prev")
        if prev is not None:
            ch = np.flatnonzero((cur != prev).any(axis=1))
            rngs = []
            if ch.size:
                br = np.flatnonzero(np.diff(ch) > 64) 
                starts = np.r_[ch[0], ch[br + 1]]; ends = np.r_[ch[br], ch[-1]] + 1
                rngs = [[int(a)*64, int(b)*64] for a, b in zip(starts, ends) if (b - a) * 64 >= 65536]
            rec["changed"] = rngs
        state["prev"] = cur.copy()
        state["calls"].append(rec)
    return inner(k_id, feed, attributes)
st = RuntimeSettings(arena=False, mem_pattern=True, mem_reuse=True, execution_order="default")
so = st.session_options()
pyops.PyCustomOpDef.install_hooker(hook)
s = open_artifact_session(d, model, session_options=so, seed=0)
spec = graph_data(d, model, list(s.module.input_names()))
gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
fd = os.open(LOG, os.O_WRONLY | os.O_APPEND)
for i in range(2):
    x, y = next(gen)
    os.write(fd, f"STEP {i}\n".encode())
    state["on"] = i == 1
    s.module(x, y)
    s.optimizer.step(); s.module.lazy_reset_grad()
json.dump({"P": state["P"], "calls": state["calls"]}, open(out, "w"))
print("P", state["P"], "calls", len(state["calls"]), "found", sum(1 for c in state["calls"] for i in c["inputs"] if i[1] is not None))
