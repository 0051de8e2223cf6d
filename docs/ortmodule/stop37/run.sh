#!/bin/bash
cd /tmp/lead/s37/ortm
export ONNXCOMP_CACHE=/tmp/lead/s37/ortm/cache
echo "$(date -u +%T) start load $(cat /proc/loadavg)" >> log
nice -n 10 /tmp/lead/venv_ortm/bin/python /work/main/tools/bench_ortmodule.py --rows eager,ortmodule,ortmodule-recompute,ortmodule+recompute,ortmodule+lossless,ortmodule+comet --json ortm.json > ortm.txt 2> ortm.err
echo "$(date -u +%T) done rc=$? load $(cat /proc/loadavg)" >> log
