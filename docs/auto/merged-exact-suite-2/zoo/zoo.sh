#!/bin/bash
echo 15 > /proc/self/autogroup
cd /work/main
for spec in "resnet18 31.7MiB" "mobilenet_v2 73.6MiB" "vgg16 184MiB"; do
  set -- $spec; m=$1; b=$2
  rm -rf /tmp/lead/zoo_$m
  /usr/bin/time -f "$m transform %e s" nice -n 15 .venv/bin/onnxcomp transform /work/ref/$m -o /tmp/lead/zoo_$m --policy auto --exact --budget $b > /tmp/lead/zoo_$m.transform.log 2>&1
  for i in 1 2; do
    MALLOC_MMAP_THRESHOLD_=131072 nice -n 15 .venv/bin/onnxcomp measure /tmp/lead/zoo_$m --steps 3 --json --arena --mem-pattern --mem-reuse --order default > /tmp/lead/zoo_$m.default$i.json 2>/tmp/lead/zoo_$m.default$i.err
  done
  MALLOC_MMAP_THRESHOLD_=131072 nice -n 15 .venv/bin/onnxcomp measure /tmp/lead/zoo_$m --steps 3 --json > /tmp/lead/zoo_$m.onnxcomp.json 2>/tmp/lead/zoo_$m.onnxcomp.err
  echo "$m done $(date)"
done
