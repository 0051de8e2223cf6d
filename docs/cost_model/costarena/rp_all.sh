#!/bin/bash
# usage: rp_all.sh TREE TAG COST  -- every stored + fresh bench set
echo 15 > /proc/self/autogroup 2>/dev/null
D=/work/wt/costarena/docs/cost_model; B=/tmp/costarena/bench
nice -n 15 /work/main/.venv/bin/python /tmp/costarena/rp.py $1 $2 $3 $D/costfit/r18_measure.raw.json $D/costfit/r18_ort.raw.json $D/costfit/r18b_measure.raw.json $D/costfit/r18b_ort.raw.json $D/costall/quiet_end_repointed.json > /tmp/costarena/rpA_quiet_$2.txt 2>&1
nice -n 15 /work/main/.venv/bin/python /tmp/costarena/rp.py $1 $2 $3 $B/*.json > /tmp/costarena/rpA_fresh_$2.txt 2>&1
