#!/bin/bash
cd /tmp/lead/fc
export PYTHONPATH=/work/wt/fewchunks
PY=/work/main/.venv/bin/python
for nb in "leaky_vgg 12" "squeezenet_s 3.8"; do set -- $nb
  echo "$1 start $(date -u +%T) $(uptime | awk -F'average:' '{print $2}')" >> log
  $PY -m onnxcomp transform /tmp/lead/W/$1 -o Q_$1 --policy auto --budget ${2}MiB --json > Q_$1.transform.json 2> Q_$1.plan.log
  echo "$1 planned $(date -u +%T) rc $?" >> log
  MALLOC_MMAP_THRESHOLD_=131072 $PY -m onnxcomp measure Q_$1 --steps 3 --json --arena --mem-pattern --mem-reuse --order default > Q_$1.ortdef.json 2>/dev/null
  echo "$1 measured $(date -u +%T)" >> log
done
echo "r18 start $(date -u +%T)" >> log
$PY -m onnxcomp transform /work/ref/resnet18 -o Q_r18_15 --policy auto --budget 15MiB --json > Q_r18_15.transform.json 2> Q_r18_15.plan.log
echo "r18 planned $(date -u +%T) rc $?" >> log
MALLOC_MMAP_THRESHOLD_=131072 $PY -m onnxcomp measure Q_r18_15 --steps 3 --json --arena --mem-pattern --mem-reuse --order default > Q_r18_15.ortdef.json 2>/dev/null
MALLOC_MMAP_THRESHOLD_=131072 $PY -m onnxcomp measure Q_r18_15 --steps 3 --json > Q_r18_15.onxc.json 2>/dev/null
echo "r18 measured $(date -u +%T)" >> log
