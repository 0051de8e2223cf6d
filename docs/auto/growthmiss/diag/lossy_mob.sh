#!/bin/bash
# lossy growth-mode plan of mobilenet_v1_s on this branch (as docs/auto/stop35/scan.sh / lossygrowth R/scan.sh)
export PYTHONPATH=/work/wt/growthmiss MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
cd /tmp/growthmiss; mkdir -p L
n=mobilenet_v1_s
echo "$(date -u +%T) scan start load $(cat /proc/loadavg)"
nice -n 10 $PY -m onnxcomp inspect W/$n --budget 64KiB --budget-for ort-defaults --json > L/$n.lossy.scan.json 2> L/$n.lossy.scan.err
T=$($PY -c "
import json
d=json.load(open('L/$n.lossy.scan.json'))
def find(o):
    if isinstance(o,dict):
        if 'tightest_growth_budget_bytes' in o: return o['tightest_growth_budget_bytes']
        for v in o.values():
            r=find(v)
            if r: return r
    return None
print(find(d))")
echo "$(date -u +%T) tightest $T"
rm -rf L/${n}_lossy
nice -n 10 $PY -m onnxcomp transform W/$n -o L/${n}_lossy --policy auto --budget ${T}B --budget-for ort-defaults --json > L/$n.lossy.transform.json 2> L/$n.lossy.transform.err
echo "$(date -u +%T) transform rc=$? load $(cat /proc/loadavg)"
nice -n 10 $PY -m onnxcomp measure L/${n}_lossy --steps 3 --json --arena --mem-pattern --mem-reuse --order default > L/${n}_lossy.ortdef.json 2> L/${n}_lossy.ortdef.err
echo "$(date -u +%T) measure rc=$? load $(cat /proc/loadavg)"
