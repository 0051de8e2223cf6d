#!/bin/bash
# Baseline re-runs (reproducibility of r18acc's baselines, same artifacts/protocol), after drive.sh ends.
while kill -0 12204 2>/dev/null; do sleep 10; done
cd /tmp/r18lossy10
export PYTHONPATH=/work/wt/r18lossy10
PY=/work/main/.venv/bin/python
T=/work/wt/r18lossy10/tools/accuracy_experiment.py
COMMON="--model resnet18 --image 64 --batch 32 --steps 150 --eval-every 50 --workdir /tmp/r18lossy10/acc --progress"
for s in "$@"; do
  echo "seed $s baseline start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> runs/log
  nice -n 10 $PY $T $COMMON --policies --seeds $s --out runs/base_s$s > runs/base_s$s.out 2> runs/base_s$s.err
  echo "seed $s baseline done $(date -u +%T) rc $?" >> runs/log
done
