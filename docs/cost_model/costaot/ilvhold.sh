#!/bin/bash
# one hold: baseline profile (prof.py) then the interleaved run. $1 model $2 measure|ort $3 tag
m=$1; st=$2; tag=$3
extra=""; [ "$st" = ort ] && extra="--ort-default"
cd /work/wt/costaot
export PYTHONPATH=/work/wt/costaot MALLOC_MMAP_THRESHOLD_=131072
A=/tmp/costaot/art/$m
echo "queued $(date -u +%T) $(cat /proc/loadavg)"
setsid -w bash -c "flock /tmp/timing.lock bash -c 'echo locked \$(date -u +%T) \$(cat /proc/loadavg); nice -n 0 timeout 220 bash -c \"/work/main/.venv/bin/python docs/cost_model/costaot/prof.py $A $st /tmp/costaot/ilv/p_${m}_${st}_$tag.json training_model.onnx && /work/main/.venv/bin/python /tmp/costaot/ilv.py $extra $A baseline=training_model.onnx dpr-fp16=dpr-fp16.onnx dpr-fp8=dpr-fp8.onnx comet=comet.onnx zfp-8=zfp-8.onnx lossless=lossless.onnx --steps 5 --warmup 2 --json /tmp/costaot/ilv/s_${m}_${st}_$tag.json\"; echo rc=\$? end \$(date -u +%T) \$(cat /proc/loadavg); times'"
