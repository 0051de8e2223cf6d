#!/bin/bash
echo 15 > /proc/self/autogroup 2>/dev/null
export PYTHONPATH=/work/wt/costfit
cd /work/wt/costfit
for st in measure ort-default; do
  echo "== $(date -u +%T) $st | before: $(uptime)"
  setsid -w bash -c "flock /tmp/timing.lock nice -n 0 timeout 180 /work/main/.venv/bin/python tools/bench_cost_model.py /tmp/costall/resnet18 --policies dpr-fp8 comet dpr-fp16 lossless --settings $st --steps 3 --json /tmp/costfit/r18_$st.json" 2>&1 | grep -v -i warn
  echo "== $(date -u +%T) rc=$? after: $(uptime)"
done
