#!/bin/bash
# extra plans (tightest budgets the heap-term planner accepts), from jobs.txt lines "SRC NAME BUDGET", appended while it runs
cd /tmp/heapterm
while pgrep -f after.sh >/dev/null; do sleep 10; done
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/tmp/heapterm/code_after
PY=/work/main/.venv/bin/python
m() { echo "== measure $1 -> $2 $(date -u +%T) load $(cat /proc/loadavg)"; nice -n 10 $PY -m onnxcomp measure $1 --steps 5 --json > $2 2>> meas.err; echo "rc $?"; }
i=1
while true; do
  line=$(sed -n "${i}p" jobs.txt)
  if [ -z "$line" ]; then sleep 10; [ -e jobs.stop ] && break; continue; fi
  set -- $line
  echo "== plan $2 ($3) $(date -u +%T) load $(cat /proc/loadavg)"
  /usr/bin/time -f "wall %e user %U" nice -n 10 $PY -m onnxcomp transform $1 -o after/$2 --policy auto --budget $3 --json > after/$2.transform.json 2> after/$2.plan.log; rc=$?; echo "rc $rc"; tail -1 after/$2.plan.log
  if [ $rc = 0 ]; then m after/$2 after/$2.onxc.1.json; m after/$2 after/$2.onxc.2.json; fi
  i=$((i+1))
done
echo done $(date -u +%T)
