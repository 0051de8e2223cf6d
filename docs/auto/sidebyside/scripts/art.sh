#!/bin/bash
export PYTHONPATH=/work/wt/sidebyside
PY=/work/main/.venv/bin/python
cd /tmp/sidebyside
for m in resnet18 mobilenet_v2 vgg16; do
  echo "$(date +%T) $m start load $(cat /proc/loadavg)"
  nice -n 10 $PY -m onnxcomp artifacts --model $m --batch 32 --image 64 --classes 10 -o Z/$m > Z/$m.art.log 2>&1
  echo "$(date +%T) $m done rc=$?"
done
