#!/bin/bash
cd /tmp/lead/s38
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
W=/tmp/lead/W
n=leaky_vgg
echo "$(date -u +%T) start load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/main rev-parse --short HEAD)" >> lv.log
nice -n 5 $PY -m onnxcomp inspect $W/$n --budget 64KiB --budget-for ort-defaults --json > $n.lossy.scan.json 2> $n.lossy.scan.err
tb=$($PY -c "import json;print(json.load(open('$n.lossy.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
echo "$(date -u +%T) tightest $tb" >> lv.log
nice -n 5 $PY -m onnxcomp transform $W/$n -o ${n}_lossy --force --policy auto --budget ${tb}B --budget-for ort-defaults --verify --json > $n.lossy.transform.json 2> $n.lossy.transform.err
rc=$?
echo "$(date -u +%T) transform rc=$rc" >> lv.log
nice -n 5 $PY -m onnxcomp measure ${n}_lossy --steps 3 --json --arena --mem-pattern --mem-reuse --order default > ${n}_lossy.ortdef.json 2>${n}_lossy.ortdef.err
echo "$(date -u +%T) measured rc=$?" >> lv.log
