#!/bin/bash
# main's code (5ae2ba5, git archive in /tmp/lossygrowth/old): ORT-defaults growth of each graph dir given
cd /tmp/lossygrowth
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/tmp/lossygrowth/old
PY=/work/main/.venv/bin/python
for g in "$@"; do
  t=$(echo $g|tr / _)
  echo "$(date -u +%T) $g load $(cut -d' ' -f1 /proc/loadavg)" >> V/run_main.log
  (cd /tmp/lossygrowth/old && nice -n 10 $PY -m onnxcomp measure /tmp/lossygrowth/$g --steps 3 --json --arena --mem-pattern --mem-reuse --order default > /tmp/lossygrowth/V/$t.ortdef.main.json 2> /tmp/lossygrowth/V/$t.ortdef.main.err)
done
echo "$(date -u +%T) done" >> V/run_main.log
