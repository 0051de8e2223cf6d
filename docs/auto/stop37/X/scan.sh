#!/bin/bash
# growth-mode exact scan on main (stop 37): inspect at 64KiB -> tightest -> transform -> measure (ORT defaults)
cd /tmp/lead/s37/X
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
W=/tmp/lead/W
for n in "$@"; do
  echo "$(date -u +%T) scan exact $n load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/main rev-parse --short HEAD)" >> scan.log
  nice -n 5 $PY -m onnxcomp inspect $W/$n --budget 64KiB --budget-for ort-defaults --exact --json > $n.exact.scan.json 2> $n.exact.scan.err
  tb=$($PY -c "import json;print(json.load(open('$n.exact.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
  echo "$(date -u +%T) tightest $tb" >> scan.log
  nice -n 5 $PY -m onnxcomp transform $W/$n -o ${n}_exact --policy auto --exact --budget ${tb}B --budget-for ort-defaults --json > $n.exact.transform.json 2> $n.exact.transform.err
  echo "$(date -u +%T) transform rc=$?" >> scan.log
  nice -n 5 $PY -m onnxcomp measure ${n}_exact --steps 3 --json --arena --mem-pattern --mem-reuse --order default > ${n}_exact.ortdef.json 2>${n}_exact.ortdef.err
  echo "$(date -u +%T) measured" >> scan.log
done
echo "$(date -u +%T) done" >> scan.log
