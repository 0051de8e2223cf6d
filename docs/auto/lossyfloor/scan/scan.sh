#!/bin/bash
# lead's stop-38 lv.sh, per net, on this branch (+ the baseline re-measured in the same run)
cd ${OUTDIR:-/tmp/lossyfloor/S}
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/lossyfloor
PY=/work/main/.venv/bin/python
W=/tmp/lossyfloor/W
for n in "$@"; do
echo "$(date -u +%T) start $n load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/wt/lossyfloor rev-parse --short HEAD)" >> scan.log
nice -n 10 $PY -m onnxcomp measure $W/$n --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $n.base.ortdef.json 2> $n.base.ortdef.err
nice -n 10 $PY -m onnxcomp inspect $W/$n --budget 64KiB --budget-for ort-defaults --json > $n.lossy.scan.json 2> $n.lossy.scan.err
tb=$($PY -c "import json;print(json.load(open('$n.lossy.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
echo "$(date -u +%T) tightest $tb" >> scan.log
nice -n 10 $PY -m onnxcomp transform $W/$n -o ${n}_lossy --force --policy auto --budget ${tb}B --budget-for ort-defaults --verify --json > $n.lossy.transform.json 2> $n.lossy.transform.err
rc=$?
echo "$(date -u +%T) transform rc=$rc" >> scan.log
nice -n 10 $PY -m onnxcomp measure ${n}_lossy --steps 3 --json --arena --mem-pattern --mem-reuse --order default > ${n}_lossy.ortdef.json 2>${n}_lossy.ortdef.err
echo "$(date -u +%T) measured rc=$? $n" >> scan.log
done
