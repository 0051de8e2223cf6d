#!/bin/bash
# usage: hold.sh TIMEOUT CMD...   one lock hold in its own autogroup at nice 0
T=$1; shift
echo "queued $(date -u +%T) $(cat /proc/loadavg)"
setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); cd /work/wt/costgap; PYTHONPATH=/work/wt/costgap XDG_CACHE_HOME=/tmp/costgap/noxdg nice -n 0 timeout $T $* 2>&1 | grep -v Warning; echo end \$(date -u +%T) \$(cat /proc/loadavg); times'"
