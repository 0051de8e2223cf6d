#!/bin/bash
cd /tmp/lead/s37/ct
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
for B in 13.5 14; do
echo "$(date -u +%T) WR$B start load $(cut -d' ' -f1 /proc/loadavg)" >> log
nice -n 10 $PY -m onnxcomp transform /tmp/lead/W/wide_resnet_s -o WR$B --policy auto --budget ${B}MiB --json > WR$B.transform.json 2> WR$B.err; rc=$?; echo "$(date -u +%T) WR$B transform rc=$rc" >> log
if [ $rc = 0 ]; then nice -n 10 $PY -m onnxcomp measure WR$B --steps 5 --json > WR$B.onxc.json 2>WR$B.m.err; echo "$(date -u +%T) WR$B measured rc=$?" >> log; break; fi
done
