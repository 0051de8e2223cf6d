#!/bin/bash
# Plan runs, one seed per process, one at a time, niced. Usage: drive.sh POLICY SEED...
# (POLICY's graph is already written at acc/resnet18-b32-64px-c10/<POLICY with @ -> _>; --reuse-transforms trains it.)
# The baseline seeds are r18acc's (same artifacts, checkpoint and protocol): /tmp/r18acc/runs/base_s*.
cd /tmp/r18lossy10
export PYTHONPATH=/work/wt/r18lossy10
PY=/work/main/.venv/bin/python
T=/work/wt/r18lossy10/tools/accuracy_experiment.py
COMMON="--model resnet18 --image 64 --batch 32 --steps 150 --eval-every 50 --workdir /tmp/r18lossy10/acc --progress"
P=$1; shift
for s in "$@"; do
  echo "seed $s $P start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> runs/log
  nice -n 10 $PY $T $COMMON --policies $P --no-baseline --reuse-transforms --seeds $s --out runs/${P}_s$s > runs/${P}_s$s.out 2> runs/${P}_s$s.err
  echo "seed $s $P done $(date -u +%T) rc $?" >> runs/log
done
