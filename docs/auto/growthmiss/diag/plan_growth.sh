#!/bin/bash
# growth-mode `auto --exact` plan of MobileNetV2 on this branch (as /tmp/sidebyside/plan.sh), then ORT-defaults measure
export PYTHONPATH=/work/wt/growthmiss MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
cd /tmp/growthmiss
mkdir -p P; rm -rf P/mobilenet_v2_growth
n=mobilenet_v2
echo "$(date -u +%T) inspect start load $(cat /proc/loadavg)"
nice -n 10 $PY -m onnxcomp inspect SBS/$n --budget 64KiB --budget-for ort-defaults --exact --json > P/$n.growth.inspect.json 2> P/$n.growth.inspect.err
T=$($PY -c "
import json
d=json.load(open('P/$n.growth.inspect.json'))
def find(o):
    if isinstance(o,dict):
        if 'tightest_growth_budget_bytes' in o: return o['tightest_growth_budget_bytes']
        for v in o.values():
            r=find(v)
            if r: return r
    return None
print(find(d))")
echo "$(date -u +%T) growth budget $T"
nice -n 10 $PY -m onnxcomp transform SBS/$n -o P/${n}_growth --policy auto --exact --budget ${T}B --budget-for ort-defaults --json --force > P/$n.growth.transform.json 2> P/$n.growth.err
echo "$(date -u +%T) transform rc=$? load $(cat /proc/loadavg)"
nice -n 10 $PY -m onnxcomp measure P/${n}_growth --steps 3 --json --arena --mem-pattern --mem-reuse --order default > P/mnv2.growth.ortdef.json 2> P/mnv2.growth.ortdef.err
echo "$(date -u +%T) measure rc=$? load $(cat /proc/loadavg)"
