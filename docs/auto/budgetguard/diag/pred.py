import sys, json
from onnxcomp.planner import ort_growth
for d in sys.argv[1:]:
    p = ort_growth.predict_growth(d + "/training_model.onnx", reorder=False).to_dict()
    print(d, "pred %.3f MiB  P %.3f arena %.3f heap %.3f nodes %.3f residue %.3f tables %.3f" % tuple(
        p[k] / 2**20 for k in ("growth_bytes", "pattern_bytes", "arena_bytes", "heap_bytes", "node_bytes", "residue_bytes", "codec_table_bytes")))
