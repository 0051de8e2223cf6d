#!/bin/bash
# one lock hold: $1 = tag (aot|numba); env ONNXCOMP_CODEC_BACKEND passed by caller
tag=$1
cd /work/wt/costaot
export PYTHONPATH=/work/wt/costaot
echo "queued $(date -u +%T) $(cat /proc/loadavg)"
setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); nice -n 0 timeout 230 /work/main/.venv/bin/python -m onnxcomp calibrate --profile /tmp/costaot/art/resnet18 -o /tmp/costaot/cal_$tag.json --force 2>&1 | tail -30; echo rc=\${PIPESTATUS[0]} end \$(date -u +%T) \$(cat /proc/loadavg); times'"
