#!/bin/bash
# after3: planner with the written-graph heap term (adc0cc4 snapshot): re-plan the accepted plans, measure 2 x 5
cd /tmp/heapterm
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/tmp/heapterm/code_after2
PY=/work/main/.venv/bin/python
m() { echo "== measure $1 -> $2 $(date -u +%T) load $(cat /proc/loadavg)"; nice -n 10 $PY -m onnxcomp measure $1 --steps 5 --json > $2 2>> meas.err; echo "rc $?"; }
p() {
  echo "== plan $2 ($3) $(date -u +%T) load $(cat /proc/loadavg)"
  /usr/bin/time -f "wall %e user %U" nice -n 10 $PY -m onnxcomp transform $1 -o after3/$2 --policy auto --budget $3 --json > after3/$2.transform.json 2> after3/$2.plan.log; rc=$?; echo "rc $rc"; tail -1 after3/$2.plan.log
  if [ $rc = 0 ]; then m after3/$2 after3/$2.onxc.1.json; m after3/$2 after3/$2.onxc.2.json; fi
}
p W/mobilenet_v1_s mobilenet79 7.9MiB
p W/leaky_vgg leaky_vgg13 13MiB
p r18 A20 20MiB
p r18 A15 15MiB
echo done $(date -u +%T)
