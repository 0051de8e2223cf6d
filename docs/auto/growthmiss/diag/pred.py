import sys, json
from pathlib import Path
from onnxcomp.planner.ort_growth import predict_growth
M=2**20
for d in sys.argv[1:]:
    p = predict_growth(Path(d)/"training_model.onnx")
    dd = p.to_dict()
    print(d, json.dumps({k:(round(v/M,3) if isinstance(v,int) and k.endswith("bytes") else v) for k,v in dd.items()}), flush=True)
