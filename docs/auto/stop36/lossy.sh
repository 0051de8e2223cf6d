#!/bin/bash
cd /tmp/lead/s36
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
ORT="--arena --mem-pattern --mem-reuse --order default"
for n in squeezenet_s mobilenet_v1_s plain_deep wide_resnet_s densenet_s leaky_vgg; do
  echo "$(date -u +%T) $n load $(cut -d' ' -f1 /proc/loadavg)" >> lossy.log
  nice -n 10 $PY -m onnxcomp measure /tmp/lossygrowth/R/${n}_lossy --steps 3 --json $ORT > L/$n.ortdef.json 2> L/$n.err
done
echo "$(date -u +%T) done" >> lossy.log
