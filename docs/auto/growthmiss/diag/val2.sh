#!/bin/bash
cd /tmp/growthmiss
PY=/work/main/.venv/bin/python
n=after2
echo "$(date -u +%T) $n start load $(cat /proc/loadavg)"
PYTHONPATH=/work/wt/growthmiss nice -n 10 $PY /work/wt/growthmiss/tools/growth_validate.py /tmp/lossygrowth /work/wt/growthmiss/docs/auto/lossygrowth/validation.json --out val52.$n.parts.json > val52.$n.md 2> val52.$n.err
echo "$(date -u +%T) $n done load $(cat /proc/loadavg)"
./plan_growth2.sh
