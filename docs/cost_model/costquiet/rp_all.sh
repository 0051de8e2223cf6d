#!/bin/bash
# usage: rp_all.sh TREE TAG COST|-  -- re-predict every stored bench set (A quiet R18, B costarena fresh, C costall loaded)
echo 15 > /proc/self/autogroup 2>/dev/null
D=/work/wt/costquiet/docs/cost_model; PY=/work/main/.venv/bin/python
export XDG_CACHE_HOME=/tmp/costquiet/noxdg
nice -n 15 $PY /tmp/costquiet/rp.py $1 $2 $3 $D/costfit/r18_measure.raw.json $D/costfit/r18_ort.raw.json $D/costfit/r18b_measure.raw.json $D/costfit/r18b_ort.raw.json $D/costall/quiet_end_repointed.json > /tmp/costquiet/rpA_$2.txt 2>&1
nice -n 15 $PY /tmp/costquiet/rp.py $1 $2 $3 $D/costarena/r*_*.json > /tmp/costquiet/rpB_$2.txt 2>&1
nice -n 15 $PY /tmp/costquiet/rp.py $1 $2 $3 $D/costall/r2_*.json $D/costall/b_*.json > /tmp/costquiet/rpC_$2.txt 2>&1
