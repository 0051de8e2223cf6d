#!/bin/bash
# meas.sh DIR TAG CODE(new|base) NPROC : onnxcomp-settings step peaks over NPROC fresh processes x 5 steps, then
# ORT-defaults growth once. new = this branch (trimmed baselines), base = main's tree (untrimmed).
cd /tmp/peakjump
D=$1; T=$1; C=$2; N=${3:-3}
PY=/work/main/.venv/bin/python
if [ "$C" = base ]; then export PYTHONPATH=/tmp/peakjump/base; else export PYTHONPATH=/tmp/peakjump/new; fi
export MALLOC_MMAP_THRESHOLD_=131072
for i in $(seq 1 $N); do
  echo "$T $C onxc $i $(date -u +%T) $(cat /proc/loadavg)" >> meas.log
  nice -n 10 $PY -m onnxcomp measure $D --steps 5 --json > $T.$C.onxc.$i.json 2>/dev/null
done
echo "$T $C ortdef $(date -u +%T) $(cat /proc/loadavg)" >> meas.log
nice -n 10 $PY -m onnxcomp measure $D --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $T.$C.ortdef.json 2>/dev/null
echo "$T $C done $(date -u +%T)" >> meas.log
