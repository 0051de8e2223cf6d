#!/bin/bash
cd /tmp/aotlossy
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
ORT="--arena --mem-pattern --mem-reuse --order default"
for d in "$@"; do t=$(basename $d)
  echo "$(date -u +%T) $t aot load $(cut -d' ' -f1 /proc/loadavg)" >> M/log
  PYTHONPATH=/tmp/aotlossy/shim:/work/wt/aotlossy nice -n 10 $PY -m onnxcomp measure $d --steps 3 --json $ORT > M/$t.aot.json 2>M/$t.aot.err
done
echo "$(date -u +%T) done" >> M/log
