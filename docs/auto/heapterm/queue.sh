#!/bin/bash
# one heavy process at a time: calibration measures (trimmed measure, 5 steps), then main's R18 plans + measures
cd /tmp/heapterm
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/main
PY=/work/main/.venv/bin/python
m() { echo "== measure $1 -> $2 $(date -u +%T) load $(cat /proc/loadavg)"; nice -n 10 $PY -m onnxcomp measure $1 --steps 5 --json > $2 2>> meas.err; echo "rc $?"; }
for n in squeezenet_s plain_deep mobilenet_v1_s wide_resnet_s densenet_s leaky_vgg; do
  m W/$n calib/$n.base.json
  m fg/$n calib/$n.fg.json
done
m r18 calib/r18.base.json
for b in 20 15 12; do
  echo "== plan B$b $(date -u +%T) load $(cat /proc/loadavg)"
  /usr/bin/time -f "wall %e user %U" nice -n 10 $PY -m onnxcomp transform r18 -o before/B$b --policy auto --budget ${b}MiB --json > before/B$b.transform.json 2> before/B$b.plan.log; echo "rc $?"
  m before/B$b before/B$b.onxc.1.json
done
for b in 20 15 12; do m before/B$b before/B$b.onxc.2.json; done
echo done $(date -u +%T)
