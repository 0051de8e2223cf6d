import sys, json, warnings
warnings.simplefilter("ignore")
from onnxcomp.planner.cost_model import CostModel
files = sys.argv[1:]
ms = [CostModel.load(f) for f in files]
print("codec dir size | " + " | ".join(f.split('/')[-1] for f in files))
for c in ["dpr_fp16","dpr_fp8","dpr_bf16","sz","zfp","maxpool_index","sparse","intervalmask","bitmask","signbits","relumask"]:
    for d in ("encode","decode"):
        for n in (256<<10, 2<<20, 16<<20):
            vals = [m.codec_seconds(c,d,n,0.5)*1e3 for m in ms]
            va = [m.codec_seconds(c,d,n,0.5,arena=True)*1e3 for m in ms]
            print(f"{c:13s} {d} {n>>10:6d}KiB " + " ".join(f"{v:7.3f}" for v in vals) + "  arena " + " ".join(f"{v:7.3f}" for v in va))
for m,f in zip(ms,files):
    print(f, m.meta.get('machine'), m.meta.get('load_average'), m.meta.get('profiled_model',{}).get('step_seconds'))
