#!/bin/bash
# merged main: growth-mode scan (inspect at 64KiB reports the tightest growth budget), transform there, measure
cd /tmp/lead/s35
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
mode=$1; shift
flag=""; [ "$mode" = exact ] && flag="--exact"
mkdir -p G
for n in "$@"; do
  echo "$(date -u +%T) scan $mode $n load $(cut -d' ' -f1 /proc/loadavg)" >> scan.log
  nice -n 5 $PY -m onnxcomp inspect /tmp/lead/W/$n --budget 64KiB --budget-for ort-defaults $flag --json > G/$n.$mode.scan.json 2> G/$n.$mode.scan.err
  tb=$($PY -c "import json;print(json.load(open('G/$n.$mode.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
  echo "$(date -u +%T) tightest $tb" >> scan.log
  nice -n 5 $PY -m onnxcomp transform /tmp/lead/W/$n -o G/${n}_$mode --policy auto $flag --budget ${tb}B --budget-for ort-defaults --json > G/$n.$mode.transform.json 2> G/$n.$mode.transform.err
  echo "$(date -u +%T) transform rc=$?" >> scan.log
  nice -n 5 $PY -m onnxcomp measure G/${n}_$mode --steps 3 --json --arena --mem-pattern --mem-reuse --order default > G/${n}_$mode.ortdef.json 2>/dev/null
  nice -n 5 $PY -m onnxcomp measure G/${n}_$mode --steps 3 --json > G/${n}_$mode.onxc.json 2>/dev/null
done
echo "$(date -u +%T) done $mode" >> scan.log
