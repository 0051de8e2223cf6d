#!/bin/bash
# usage: bench.sh MODEL SETTINGS TAG POLICIES...   one lock hold, one chunk
echo 15 > /proc/self/autogroup 2>/dev/null
m=$1; st=$2; tag=$3; shift 3
export PYTHONPATH=/work/wt/costarena
cd /work/wt/costarena
echo "== $(date -u +%T) $m $st $tag [$*] | before: $(uptime)"
setsid -w bash -c "flock /tmp/timing.lock nice -n 0 timeout 230 /work/main/.venv/bin/python tools/bench_cost_model.py /tmp/costall/$m --policies $* --settings $st --steps 3 --json /tmp/costarena/bench/${tag}_${m}_${st}.json" 2>&1 | grep -v -i warn
echo "== $(date -u +%T) rc=$? after: $(uptime)"
