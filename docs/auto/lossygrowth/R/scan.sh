#!/bin/bash
# growth-mode lossy scan on this branch (as docs/auto/stop35/scan.sh): inspect at 64KiB -> tightest -> transform -> measure
cd /tmp/lossygrowth
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/lossygrowth
PY=/work/main/.venv/bin/python
for n in "$@"; do
  echo "$(date -u +%T) scan lossy $n load $(cut -d' ' -f1 /proc/loadavg)" >> R/scan.log
  nice -n 10 $PY -m onnxcomp inspect W/$n --budget 64KiB --budget-for ort-defaults --json > R/$n.lossy.scan.json 2> R/$n.lossy.scan.err
  tb=$($PY -c "import json;print(json.load(open('R/$n.lossy.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
  echo "$(date -u +%T) tightest $tb" >> R/scan.log
  nice -n 10 $PY -m onnxcomp transform W/$n -o R/${n}_lossy --policy auto --budget ${tb}B --budget-for ort-defaults --json > R/$n.lossy.transform.json 2> R/$n.lossy.transform.err
  echo "$(date -u +%T) transform rc=$?" >> R/scan.log
  nice -n 10 $PY -m onnxcomp measure R/${n}_lossy --steps 3 --json --arena --mem-pattern --mem-reuse --order default > R/${n}_lossy.ortdef.json 2>R/${n}_lossy.ortdef.err
  echo "$(date -u +%T) measured" >> R/scan.log
done
echo "$(date -u +%T) done" >> R/scan.log
