"""Profile one graph in-process (run under MALLOC_MMAP_THRESHOLD_=131072) with ORT intra-op spinning on/off;
print per-kind sums of codec ops and others. usage: spin.py DIR GRAPH SPIN(0/1) SETTINGS(measure|ort) OUT.json"""
import sys, json, tempfile, collections
from pathlib import Path
import onnxcomp.runtime.session as S
art, graph, spin, st, out = sys.argv[1:6]
orig = S.session_options
def patched(**kw):
    so = orig(**kw)
    so.add_session_config_entry("session.intra_op.allow_spinning", spin)
    return so
S.session_options = patched
from onnxcomp.runtime.calibrate import _profile_worker
from onnxcomp.runtime.session import RuntimeSettings
settings = RuntimeSettings() if st == "measure" else RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
with tempfile.TemporaryDirectory() as tmp:
    r = _profile_worker({"artifact_dir": art, "model": str(Path(art) / graph), "steps": 3, "warmup": 1 if st == "measure" else 2,
                         "settings": settings.to_dict(), "tmp": tmp})
feats = r["features"]
agg = collections.defaultdict(float)
for n, t in r["times"].items():
    k = feats.get(n, ["?"])[0]
    agg["codec:" + k if k.startswith("Onnxcomp") else "other"] += t
print(f"spin={spin} {st} {graph}: step {r['step_seconds']:.3f} nodes {sum(r['times'].values()):.3f}", {k: round(v * 1e3, 1) for k, v in sorted(agg.items())})
json.dump(r, open(out, "w"))
