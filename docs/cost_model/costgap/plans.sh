#!/bin/bash
echo 15 > /proc/self/autogroup 2>/dev/null
cd /tmp/costgap/plans
for tree in main costgap; do
  T=/work/main; [ $tree = costgap ] && T=/work/wt/costgap
  for spec in "resnet18 31.7MiB" "mobilenet_v2 73.6MiB"; do set -- $spec
    s=$(date +%s)
    PYTHONPATH=$T XDG_CACHE_HOME=/tmp/costgap/noxdg nice -n 15 /work/main/.venv/bin/python -m onnxcomp transform /work/ref/$1 -o /tmp/costgap/plans/${tree}_$1 --policy auto --exact --budget $2 --json > /tmp/costgap/plans/${tree}_$1.json 2>/tmp/costgap/plans/${tree}_$1.err
    echo "$tree $1 rc=$? $(( $(date +%s) - s ))s load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
for m in resnet18 mobilenet_v2; do for f in $(cd main_$m && ls); do cmp -s main_$m/$f costgap_$m/$f && echo "$m $f identical" || echo "$m $f DIFFERS"; done; done
