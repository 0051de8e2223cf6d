#!/bin/bash
export PYTHONPATH=/work/wt/costarena MALLOC_MMAP_THRESHOLD_=131072
P=/work/main/.venv/bin/python
echo "load before: $(uptime)"
for s in 1 0 1 0; do $P /tmp/costarena/spin.py /tmp/costall/resnet18 dpr-fp8.onnx $s measure /tmp/costarena/spin_$s.json 2>&1 | grep spin=; done
echo "load after: $(uptime)"
