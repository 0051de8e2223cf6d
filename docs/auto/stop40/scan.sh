#!/bin/bash
# usage: scan.sh NET MODE(lossy|exact) [BUDGET_FOR]
cd /tmp/lead/s40
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
W=/tmp/lead/W
n=$1; mode=$2; bf=${3:-ort-defaults}
ex=""; [ "$mode" = exact ] && ex="--exact"
tag=${n}_${mode}_${bf}
echo "$(date -u +%T) $tag start load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/main rev-parse --short HEAD)" >> scan.log
nice -n 5 $PY -m onnxcomp inspect $W/$n --budget 64KiB --budget-for $bf $ex --json > $tag.scan.json 2> $tag.scan.err
tb=$($PY -c "import json;print(json.load(open('$tag.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
echo "$(date -u +%T) $tag tightest $tb" >> scan.log
nice -n 5 $PY -m onnxcomp transform $W/$n -o $tag --force --policy auto $ex --budget ${tb}B --budget-for $bf --verify --margin 0.05 --json > $tag.transform.json 2> $tag.transform.err
echo "$(date -u +%T) $tag transform rc=$?" >> scan.log
nice -n 5 $PY -m onnxcomp measure $tag --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $tag.ortdef.json 2>$tag.ortdef.err
echo "$(date -u +%T) $tag measured rc=$?" >> scan.log
nice -n 5 $PY -m onnxcomp measure $W/$n --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $n.base.ortdef.json 2>$n.base.ortdef.err
echo "$(date -u +%T) $n baseline measured rc=$?" >> scan.log
