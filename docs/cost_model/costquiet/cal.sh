#!/bin/bash
cd /work/wt/costquiet
echo "start $(date -u +%T) $(uptime)"
PYTHONPATH=/work/wt/costquiet XDG_CACHE_HOME=/tmp/costquiet/calxdg setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); nice -n 0 timeout 230 /usr/bin/time -v /work/main/.venv/bin/python -m onnxcomp calibrate --profile /work/ref/resnet18 -o /tmp/costquiet/cal.json --force 2>&1; echo rc=\$? end \$(date -u +%T) \$(cat /proc/loadavg)'"
