#!/bin/bash
export PYTHONPATH=/work/wt/sidebyside
PY=/work/main/.venv/bin/python
cd /tmp/sidebyside
echo "$(date +%T) start load $(cat /proc/loadavg)"
$PY /work/wt/sidebyside/tools/bench_side_by_side.py --artifacts Z/resnet18 --policies lossless \
  --graph "auto --exact --budget 31.5MiB=G/resnet18_step" --graph "auto --exact --budget-for ort-defaults 42.1MiB=G/resnet18_growth" \
  --steps 4 --rounds $1 --lock /tmp/timing.lock --json SBS/resnet18.$2.json > SBS/resnet18.$2.md 2> SBS/resnet18.$2.err
echo "$(date +%T) done rc=$? load $(cat /proc/loadavg)"
