#!/bin/bash
cd /tmp/lead/s36
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
ORT="--arena --mem-pattern --mem-reuse --order default"
echo "$(date -u +%T) r18 start load $(cut -d' ' -f1 /proc/loadavg)" >> r18.log
$PY -m onnxcomp transform /tmp/lead/r18 -o R20 --policy auto --budget 20MiB --json > R20.transform.json 2> R20.err
echo "$(date -u +%T) planned rc=$?" >> r18.log
for i in 1 2; do
  $PY -m onnxcomp measure R20 --steps 3 --json $ORT > R20.ortdef.$i.json 2>/dev/null
done
$PY -m onnxcomp measure R20 --steps 5 --json > R20.onxc.json 2>/dev/null
echo "$(date -u +%T) done load $(cut -d' ' -f1 /proc/loadavg)" >> r18.log
