#!/bin/bash
# after: this branch plans R18 and suite nets with the heap term, then measures what it accepts (5 steps, 2 processes)
cd /tmp/heapterm
while pgrep -f queue.sh >/dev/null; do sleep 10; done
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/tmp/heapterm/code_after
PY=/work/main/.venv/bin/python
m() { echo "== measure $1 -> $2 $(date -u +%T) load $(cat /proc/loadavg)"; nice -n 10 $PY -m onnxcomp measure $1 --steps 5 --json > $2 2>> meas.err; echo "rc $?"; }
p() { # src out budget
  echo "== plan $2 ($3) $(date -u +%T) load $(cat /proc/loadavg)"
  /usr/bin/time -f "wall %e user %U" nice -n 10 $PY -m onnxcomp transform $1 -o after/$2 --policy auto --budget $3 --json > after/$2.transform.json 2> after/$2.plan.log; rc=$?; echo "rc $rc"; tail -1 after/$2.plan.log
  if [ $rc = 0 ]; then m after/$2 after/$2.onxc.1.json; m after/$2 after/$2.onxc.2.json; fi
}
p r18 A20 20MiB
p W/leaky_vgg leaky_vgg 12MiB
p W/wide_resnet_s wide_resnet_s 9.6MiB
p W/plain_deep plain_deep 5.2MiB
p W/squeezenet_s squeezenet_s 3.8MiB
p W/mobilenet_v1_s mobilenet_v1_s 4.6MiB
p r18 A15 15MiB
p r18 A12 12MiB
echo done $(date -u +%T)
