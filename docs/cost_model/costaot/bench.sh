#!/bin/bash
# one lock hold per chunk: "model settings" pairs as args; COST= cost model json
cd /work/wt/costaot
export PYTHONPATH=/work/wt/costaot
unset ONNXCOMP_CODEC_BACKEND
for spec in "$@"; do
  set -- $spec
  echo "chunk $1 $2 queued $(date -u +%T) $(cat /proc/loadavg)"
  setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); nice -n 0 timeout 230 /work/main/.venv/bin/python tools/bench_cost_model.py /tmp/costaot/art/$1 --policies dpr-fp16 dpr-fp8 comet zfp-8 lossless --settings $2 --steps 3 --cost $COST --json /tmp/costaot/bench/q_$1_$2.json 2>&1 | grep -v Warning | tail -12; echo rc=\${PIPESTATUS[0]} end \$(date -u +%T) \$(cat /proc/loadavg); times'"
  sleep 20   # let other engineers' timings in between holds
done
