#!/bin/bash
# one timing-lock hold in its own autogroup, nice 0, timeout 200: hold.sh CMD...
cd /work/wt/costaot
export PYTHONPATH=/work/wt/costaot
echo "queued $(date -u +%T) $(cat /proc/loadavg)"
setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); nice -n 0 timeout 200 $*; echo rc=\$? end \$(date -u +%T) \$(cat /proc/loadavg); times'"
