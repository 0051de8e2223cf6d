#!/bin/bash
cd /tmp/growthmiss
PY=/work/main/.venv/bin/python
for side in before:/work/main after:/work/wt/growthmiss; do
  n=${side%%:*}; pp=${side#*:}
  echo "$(date -u +%T) $n start load $(cat /proc/loadavg)"
  PYTHONPATH=$pp nice -n 10 $PY /work/wt/growthmiss/tools/growth_validate.py /tmp/lossygrowth /work/wt/growthmiss/docs/auto/lossygrowth/validation.json --out val52.$n.parts.json > val52.$n.md 2> val52.$n.err
  PYTHONPATH=$pp nice -n 10 $PY /work/wt/growthmiss/tools/growth_validate.py /tmp/growthmiss val_mnv2.json --out valmnv2.$n.parts.json > valmnv2.$n.md 2> valmnv2.$n.err
  echo "$(date -u +%T) $n done"
done
