#!/bin/bash
# merged main (trimmed measure): suite baselines and the stop-34 lossy plans (finalgate's after/ graphs)
cd /tmp/lead/s35
PY=/work/main/.venv/bin/python
export MALLOC_MMAP_THRESHOLD_=131072
ORT="--arena --mem-pattern --mem-reuse --order default"
for n in squeezenet_s mobilenet_v1_s plain_deep wide_resnet_s densenet_s leaky_vgg; do
  echo "$n $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)" >> log
  nice -n 5 $PY -m onnxcomp measure /tmp/lead/W/$n --steps 3 --json $ORT > base.$n.ortdef.json 2>/dev/null
  nice -n 5 $PY -m onnxcomp measure /tmp/lead/W/$n --steps 3 --json > base.$n.onxc.json 2>/dev/null
  [ -d $n ] && nice -n 5 $PY -m onnxcomp measure $n --steps 3 --json $ORT > lossy.$n.ortdef.json 2>/dev/null
  [ -d $n ] && nice -n 5 $PY -m onnxcomp measure $n --steps 3 --json > lossy.$n.onxc.json 2>/dev/null
done
echo done >> log
