#!/bin/bash
# usage: bench.sh MODEL SETTINGS JSON POLICY...   (one chunk, one lock hold)
m=$1; st=$2; js=$3; shift 3
export PYTHONPATH=/work/wt/costall
cd /work/wt/costall
echo "== $(date -u +%T) $m $st $* | before: $(uptime)"
flock /tmp/timing.lock nice -n 0 timeout 230 /work/main/.venv/bin/python tools/bench_cost_model.py /tmp/costall/$m \
   --policies "$@" --settings $st --steps 3 --json $js 2>&1 | grep -v -i warn
echo "== $(date -u +%T) rc=$? after: $(uptime)"
