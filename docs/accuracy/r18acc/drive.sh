#!/bin/bash
# Paired seeds: baseline then auto@20 per seed, one process at a time, niced.
cd /tmp/r18acc
export PYTHONPATH=/work/wt/r18acc
PY=/work/main/.venv/bin/python
T=/work/wt/r18acc/tools/accuracy_experiment.py
COMMON="--model resnet18 --image 64 --batch 32 --steps 150 --eval-every 50 --workdir /tmp/r18acc/acc --progress"
for s in "$@"; do
  echo "seed $s baseline start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> runs/log
  nice -n 19 $PY $T $COMMON --policies --seeds $s --out runs/base_s$s > runs/base_s$s.out 2> runs/base_s$s.err
  echo "seed $s baseline done $(date -u +%T) rc $?" >> runs/log
  echo "seed $s auto20 start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> runs/log
  nice -n 19 $PY $T $COMMON --policies auto@20 --no-baseline --reuse-transforms --seeds $s --out runs/auto_s$s > runs/auto_s$s.out 2> runs/auto_s$s.err
  echo "seed $s auto20 done $(date -u +%T) rc $?" >> runs/log
done
