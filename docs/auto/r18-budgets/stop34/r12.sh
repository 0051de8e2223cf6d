#!/bin/bash
cd /tmp/lead/fc
PY=/work/main/.venv/bin/python
echo "r12 start $(date -u +%T) $(uptime | awk -F'average:' '{print $2}')" >> log
nice -n 5 $PY -m onnxcomp transform /work/ref/resnet18 -o Q_r18_12 --policy auto --budget 12MiB --json > Q_r18_12.transform.json 2> Q_r18_12.plan.log
echo "r12 planned $(date -u +%T) rc $?" >> log
MALLOC_MMAP_THRESHOLD_=131072 $PY /work/main/docs/auto/r18-budgets/per_step.py Q_r18_15 5 > Q_r18_15.per_step5.txt 2>&1
MALLOC_MMAP_THRESHOLD_=131072 $PY /work/main/docs/auto/r18-budgets/per_step.py Q_r18_12 5 > Q_r18_12.per_step5.txt 2>&1
MALLOC_MMAP_THRESHOLD_=131072 $PY -m onnxcomp measure Q_r18_12 --steps 3 --json --arena --mem-pattern --mem-reuse --order default > Q_r18_12.ortdef.json 2>/dev/null
echo "r12 measured $(date -u +%T)" >> log
