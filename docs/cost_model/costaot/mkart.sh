#!/bin/bash
export PYTHONPATH=/work/wt/costaot
cd /tmp/costaot
PY=/work/main/.venv/bin/python
for m in resnet18 mobilenet_v2 vgg16; do
  d=/tmp/costaot/art/$m
  t0=$(date +%s)
  [ -e $d/training_model.onnx ] || nice -n 15 $PY -m onnxcomp artifacts --model $m --batch 32 --image 64 --classes 1000 --no-smoke-test -o $d > /tmp/costaot/art/$m.art.log 2>&1
  echo "$m artifacts rc=$? $(( $(date +%s)-t0 )) s $(date -u +%T)"
  for p in dpr-fp16 dpr-fp8 comet zfp-8 lossless; do
    out=$d/$p.onnx; [ -e $out ] && continue
    t0=$(date +%s)
    nice -n 15 $PY -m onnxcomp transform $d -o $out --policy $p --json > $out.log 2>&1
    echo "$m $p rc=$? $(( $(date +%s)-t0 )) s $(date -u +%T)"
  done
done
