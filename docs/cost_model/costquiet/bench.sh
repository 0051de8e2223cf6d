#!/bin/bash
# one lock hold per chunk: model settings policies...
cd /work/wt/costquiet
export PYTHONPATH=/work/wt/costquiet XDG_CACHE_HOME=/tmp/costquiet/noxdg
for spec in "mobilenet_v2 measure" "mobilenet_v2 ort-default" "vgg16 measure" "vgg16 ort-default" "resnet18 measure" "resnet18 ort-default"; do
  set -- $spec
  echo "chunk $1 $2 queued $(date -u +%T) $(cat /proc/loadavg)"
  setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); nice -n 0 timeout 230 /work/main/.venv/bin/python tools/bench_cost_model.py /tmp/costall/$1 --policies dpr-fp16 dpr-fp8 comet zfp-8 lossless --settings $2 --steps 3 --json /tmp/costquiet/bench/q_$1_$2.json 2>&1 | grep -v Warning | tail -12; echo rc=\$? end \$(date -u +%T) \$(cat /proc/loadavg); times'"
done
