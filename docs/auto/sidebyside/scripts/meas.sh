#!/bin/bash
# meas.sh TAG DIR [onxc] : ORT-defaults growth (and onnxcomp-settings peak with 'onxc') of DIR -> M/TAG.*.json
export PYTHONPATH=/work/wt/sidebyside MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
cd /tmp/sidebyside
t=$1; d=$2
echo "$(date +%T) $t ortdef start load $(cat /proc/loadavg)"
nice -n 10 $PY -m onnxcomp measure $d --steps 3 --json --arena --mem-pattern --mem-reuse --order default > M/$t.ortdef.json 2> M/$t.ortdef.err
echo "$(date +%T) $t ortdef rc=$? load $(cat /proc/loadavg)"
if [ "$3" = onxc ]; then
nice -n 10 $PY -m onnxcomp measure $d --steps 3 --json > M/$t.onxc.json 2> M/$t.onxc.err
echo "$(date +%T) $t onxc rc=$? load $(cat /proc/loadavg)"
fi
