#!/bin/bash
# fresh round, one lock hold per (model, settings) chunk; shipped defaults (empty XDG cache)
cd /work/wt/costfit2
export PYTHONPATH=/work/wt/costfit2 XDG_CACHE_HOME=/tmp/costfit2/noxdg
for spec in "mobilenet_v2 ort-default" "resnet18 ort-default"; do
  set -- $spec
  echo "chunk $1 $2 queued $(date -u +%T) $(cat /proc/loadavg)"
  setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); nice -n 0 timeout 200 /work/main/.venv/bin/python tools/bench_cost_model.py /tmp/costall/$1 --policies dpr-fp16 dpr-fp8 comet zfp-8 lossless --settings $2 --steps 3 --json /tmp/costfit2/bench/f2_$1_$2.json 2>&1 | grep -v Warning | tail -12; echo rc=\${PIPESTATUS[0]} end \$(date -u +%T) \$(cat /proc/loadavg); times'"
  sleep 20
done
echo done $(date -u +%T)
