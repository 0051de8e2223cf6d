#!/bin/bash
cd /tmp/lead/fc
PY=/work/main/.venv/bin/python
echo "r20 start $(date -u +%T) $(uptime | awk -F'average:' '{print $2}')" >> log20
$PY -m onnxcomp transform /work/ref/resnet18 -o Q_r18_20 --policy auto --budget 20MiB --json > Q_r18_20.transform.json 2> Q_r18_20.plan.log
echo "r20 planned $(date -u +%T) rc $?" >> log20
for i in 1 2; do MALLOC_MMAP_THRESHOLD_=131072 $PY -m onnxcomp measure Q_r18_20 --steps 3 --json --arena --mem-pattern --mem-reuse --order default > Q_r18_20.ortdef.$i.json 2>/dev/null; done
MALLOC_MMAP_THRESHOLD_=131072 $PY /work/main/docs/auto/r18-budgets/per_step.py Q_r18_20 5 > Q_r18_20.per_step5.txt 2>&1
echo "r20 measured $(date -u +%T)" >> log20
