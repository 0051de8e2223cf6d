#!/bin/bash
# measure (this worktree's code) + split for each graph dir given
cd /tmp/lossygrowth
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/lossygrowth
PY=/work/main/.venv/bin/python
for g in "$@"; do
  t=$(echo $g|tr / _)
  echo "$(date -u +%T) $g load $(cut -d' ' -f1 /proc/loadavg)" >> V/run.log
  nice -n 10 $PY -m onnxcomp measure $g --steps 3 --json --arena --mem-pattern --mem-reuse --order default > V/$t.ortdef.json 2> V/$t.ortdef.err
  nice -n 10 $PY diag/split.py $g 3 > V/$t.split.json 2>/dev/null
done
echo "$(date -u +%T) done" >> V/run.log
