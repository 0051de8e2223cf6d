#!/bin/bash
cd /tmp/lead/s37/r20
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
echo "$(date -u +%T) start load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/main rev-parse --short HEAD)" >> log
nice -n 5 $PY -m onnxcomp transform /tmp/lead/r18 -o R20 --policy auto --budget 20MiB --json > R20.transform.json 2> R20.err; echo "$(date -u +%T) transform rc=$?" >> log
for i in 1 2; do nice -n 5 $PY -m onnxcomp measure R20 --steps 3 --json --arena --mem-pattern --mem-reuse --order default > R20.ortdef.$i.json 2>/dev/null; echo "$(date -u +%T) ortdef $i rc=$? load $(cut -d' ' -f1 /proc/loadavg)" >> log; done
nice -n 5 $PY /work/main/docs/auto/r18-budgets/per_step.py R20 5 > R20.perstep.txt 2>&1; echo "$(date -u +%T) perstep rc=$?" >> log
