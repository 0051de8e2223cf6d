#!/bin/bash
# today's tightest step-mode (`--budget`) exact plan of MobileNetV2 that fits, then the ORT-defaults measure
export PYTHONPATH=/work/wt/growthmiss MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
cd /tmp/growthmiss
while pgrep -f "val2.sh" > /dev/null; do sleep 5; done
B=$1
echo "$(date -u +%T) step transform budget ${B}B load $(cat /proc/loadavg)"
rm -rf P2/mobilenet_v2_step
nice -n 10 $PY -m onnxcomp transform SBS/mobilenet_v2 -o P2/mobilenet_v2_step --policy auto --exact --budget ${B}B --json --force > P2/mobilenet_v2.step.transform.json 2> P2/mobilenet_v2.step.err
echo "$(date -u +%T) transform rc=$?"
nice -n 10 $PY -m onnxcomp measure P2/mobilenet_v2_step --steps 3 --json --arena --mem-pattern --mem-reuse --order default > P2/mnv2.step.ortdef.json 2> P2/mnv2.step.ortdef.err
echo "$(date -u +%T) measure rc=$? load $(cat /proc/loadavg)"
