#!/bin/bash
# usage: tr.sh NET BUDGET TAG [extra env]
cd /tmp/headroom
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/headroom
PY=/work/main/.venv/bin/python
n=$1; b=$2; tag=$3
echo "$(date -u +%T) $tag start load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/wt/headroom rev-parse --short HEAD) SCRATCH_HEADROOM=${HR:-default}" >> run.log
nice -n 10 $PY -m onnxcomp transform W/$n -o $tag --force --policy auto --budget ${b}B --budget-for ort-defaults --json > $tag.transform.json 2> $tag.transform.err
echo "$(date -u +%T) $tag transform rc=$?" >> run.log
nice -n 10 $PY warncheck.py $tag > $tag.warn.log 2>&1; echo "$(date -u +%T) $tag merge-warnings $(grep -c 'Error merging' $tag.warn.log)" >> run.log
nice -n 10 $PY -m onnxcomp measure $tag --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $tag.ortdef.json 2> $tag.ortdef.err
echo "$(date -u +%T) $tag measured rc=$? load $(cut -d' ' -f1 /proc/loadavg)" >> run.log
