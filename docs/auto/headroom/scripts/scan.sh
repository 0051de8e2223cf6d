#!/bin/bash
# usage: scan.sh NET [BUDGET]  (no BUDGET: tightest accepted from inspect)
cd /tmp/headroom
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/headroom
PY=/work/main/.venv/bin/python
n=$1; tag=${n}_h1
echo "$(date -u +%T) $tag start load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/wt/headroom rev-parse --short HEAD)" >> scan.log
if [ -z "$2" ]; then
nice -n 10 $PY -m onnxcomp inspect W/$n --budget 64KiB --budget-for ort-defaults --json > $tag.scan.json 2> $tag.scan.err
tb=$($PY -c "import json;print(json.load(open('$tag.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
else tb=$2; fi
echo "$(date -u +%T) $tag budget $tb" >> scan.log
nice -n 10 $PY -m onnxcomp transform W/$n -o $tag --force --policy auto --budget ${tb}B --budget-for ort-defaults --verify --json > $tag.transform.json 2> $tag.transform.err
echo "$(date -u +%T) $tag transform rc=$?" >> scan.log
nice -n 10 $PY warncheck.py $tag > $tag.warn.log 2>&1; echo "$(date -u +%T) $tag merge-warnings $(grep -c 'Error merging' $tag.warn.log)" >> scan.log
nice -n 10 $PY -m onnxcomp measure $tag --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $tag.ortdef.json 2> $tag.ortdef.err
echo "$(date -u +%T) $tag measured rc=$? load $(cut -d' ' -f1 /proc/loadavg)" >> scan.log
nice -n 10 $PY -m onnxcomp measure W/$n --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $n.base.ortdef.json 2> $n.base.ortdef.err
echo "$(date -u +%T) $n baseline measured rc=$?" >> scan.log
