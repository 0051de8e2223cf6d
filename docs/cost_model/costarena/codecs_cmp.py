import json, sys, collections
from onnxcomp.planner.cost_model import LinearFit, codec_features
cal = json.load(open(sys.argv[1]))
for c in sys.argv[2:]:
    for s in cal["samples"]["codecs"]:
        if s["codec"] == c:
            print(f"{c} {s['direction']:6s} {s['nbytes']/2**20:6.2f} MiB nz {s['nonzero']:.2f} op {s['op_s']*1e3:6.2f} ms direct {s['direct_s']*1e3:6.2f} ms  op ns/B {s['op_s']/s['nbytes']*1e9:.2f}")
