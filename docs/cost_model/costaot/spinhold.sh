#!/bin/bash
tag=$1
cd /work/wt/costaot
export PYTHONPATH=/work/wt/costaot MALLOC_MMAP_THRESHOLD_=131072
A=/tmp/costaot/art/resnet18
echo "queued $(date -u +%T) $(cat /proc/loadavg)"
setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); nice -n 0 timeout 200 /work/main/.venv/bin/python /tmp/costaot/spinab.py $A baseline=training_model.onnx baseline-nospin=training_model.onnx comet=comet.onnx comet-nospin=comet.onnx --steps 8 --warmup 2 --json /tmp/costaot/spin/spin_$tag.json; echo rc=\$? end \$(date -u +%T) \$(cat /proc/loadavg); times'"
