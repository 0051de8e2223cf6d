#!/bin/bash
export PYTHONPATH=/work/wt/sidebyside
PY=/work/main/.venv/bin/python
cd /tmp/sidebyside
echo "$(date +%T) start load $(cat /proc/loadavg)"
$PY /work/wt/sidebyside/tools/bench_side_by_side.py --artifacts Z/resnet18 --policies lossless --settings onnxcomp \
  --graph "auto --exact --budget 31.5MiB=G/resnet18_step" --graph "auto --exact --budget-for ort-defaults 42.1MiB=G/resnet18_growth" \
  --threads 1 --steps 4 --rounds 2 --lock /tmp/timing.lock --json SBS/resnet18.t1.json > SBS/resnet18.t1.md 2> SBS/resnet18.t1.err
echo "$(date +%T) done rc=$? load $(cat /proc/loadavg)"
