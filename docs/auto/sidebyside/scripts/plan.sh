#!/bin/bash
# plan.sh NET : tightest step-peak and growth-mode `auto --exact` plans of Z/NET into G/NET_step, G/NET_growth
export PYTHONPATH=/work/wt/sidebyside MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
cd /tmp/sidebyside
n=$1
echo "$(date +%T) $n tight start load $(cat /proc/loadavg)"
B=$(nice -n 10 $PY tight.py Z/$n G/$n.tight.json 2> G/$n.tight.err | tail -1)
echo "$(date +%T) $n step budget $B"
nice -n 10 $PY -m onnxcomp transform Z/$n -o G/${n}_step --policy auto --exact --budget ${B}B --json --force > G/$n.step.transform.json 2> G/$n.step.err
echo "$(date +%T) $n step transform rc=$? load $(cat /proc/loadavg)"
nice -n 10 $PY -m onnxcomp inspect Z/$n --budget 64KiB --budget-for ort-defaults --exact --json > G/$n.growth.inspect.json 2> G/$n.growth.inspect.err
echo "$(date +%T) $n growth inspect rc=$?"
T=$($PY -c "
import json,sys
d=json.load(open('G/$n.growth.inspect.json'))
def find(o):
    if isinstance(o,dict):
        if 'tightest_growth_budget_bytes' in o: return o['tightest_growth_budget_bytes']
        for v in o.values():
            r=find(v)
            if r: return r
    return None
print(find(d))")
echo "$(date +%T) $n growth budget $T"
nice -n 10 $PY -m onnxcomp transform Z/$n -o G/${n}_growth --policy auto --exact --budget ${T}B --budget-for ort-defaults --json --force > G/$n.growth.transform.json 2> G/$n.growth.err
echo "$(date +%T) $n growth transform rc=$? load $(cat /proc/loadavg)"
