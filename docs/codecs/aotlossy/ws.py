from onnxcomp.custom_ops import cpu
from onnxcomp.planner import predict
import json
out = {}
for b in ("aot", "numba"):
    with cpu.use_backend(b):
        predict._codec_workspace.cache_clear(); predict._WARMED.clear()
        for codec, params in (("zfp", {"rate": 12}), ("zfp", {"rate": 8}), ("sz", {"eb": 0.01}), ("dpr_fp8", {}), ("dpr_fp16", {}), ("dpr_fp10", {})):
            for d in ("encode", "decode"):
                out.setdefault(f"{codec}{params} {d}", {})[b] = predict._codec_workspace(d, codec, json.dumps(params), (32, 64, 16, 16))
for k, v in out.items(): print(k, v, "same" if v["aot"] == v["numba"] else "DIFF")
