#!/bin/bash
# growth-mode scan on branch budgetguard: inspect at 64KiB -> tightest -> transform --verify -> measure (ORT defaults);
# baseline re-measured in the same run. usage: scan.sh exact|lossy NET...
mode=$1; shift
D=/tmp/budgetguard/S/$([ $mode = exact ] && echo X || echo L)
cd $D
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/budgetguard
PY=/work/main/.venv/bin/python
W=/tmp/budgetguard/W
EX=$([ $mode = exact ] && echo --exact)
for n in "$@"; do
  echo "$(date -u +%T) scan $mode $n load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/wt/budgetguard rev-parse --short HEAD)" >> scan.log
  nice -n 10 $PY -m onnxcomp measure $W/$n --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $n.base.ortdef.json 2>/dev/null
  nice -n 10 $PY -m onnxcomp inspect $W/$n --budget 64KiB --budget-for ort-defaults $EX --json > $n.$mode.scan.json 2> $n.$mode.scan.err
  tb=$($PY -c "import json;print(json.load(open('$n.$mode.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
  echo "$(date -u +%T) tightest $tb" >> scan.log
  nice -n 10 $PY -m onnxcomp transform $W/$n -o ${n}_$mode --force --policy auto $EX --budget ${tb}B --budget-for ort-defaults --verify --json > $n.$mode.transform.json 2> $n.$mode.transform.err
  echo "$(date -u +%T) transform rc=$?" >> scan.log
  nice -n 10 $PY -m onnxcomp measure ${n}_$mode --steps 3 --json --arena --mem-pattern --mem-reuse --order default > ${n}_$mode.ortdef.json 2>${n}_$mode.ortdef.err
  echo "$(date -u +%T) measured" >> scan.log
done
echo "$(date -u +%T) done" >> scan.log
