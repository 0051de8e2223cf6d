#!/bin/bash
cd /tmp/lead/s38
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
A=/tmp/sidebyside/Z/resnet18
echo "$(date -u +%T) start load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/main rev-parse --short HEAD)" >> r18x.log
rm -rf r18x && cp -r $A r18x
nice -n 5 $PY -m onnxcomp transform r18x -o r18x/training_model.onnx --force --policy auto --exact --budget 40119058B --budget-for ort-defaults --json > r18x.transform.json 2> r18x.transform.err
echo "$(date -u +%T) transform rc=$?" >> r18x.log
nice -n 5 $PY -m onnxcomp measure r18x --steps 3 --json --arena --mem-pattern --mem-reuse --order default > r18x.ortdef.json 2> r18x.ortdef.err
echo "$(date -u +%T) measured rc=$?" >> r18x.log
nice -n 5 $PY -m onnxcomp measure $A --steps 3 --json --arena --mem-pattern --mem-reuse --order default > r18base.ortdef.json 2> r18base.ortdef.err
echo "$(date -u +%T) base rc=$? done" >> r18x.log
