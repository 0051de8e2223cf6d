#!/bin/bash
cd /tmp/lead/s37
PY=/work/main/.venv/bin/python
C="baseline=training_model.onnx lossless=r18_lossless.onnx dpr-fp16=r18_dpr-fp16.onnx comet=r18_comet.onnx comet@numba=r18_comet.onnx"
echo "$(date -u +%T) glibc load $(cat /proc/loadavg)" >> time.log
flock /tmp/timing.lock timeout 300 $PY /work/main/tools/bench_steps.py r18t $C --steps 12 --warmup 2 --json time_glibc.json > time_glibc.txt 2>&1
echo "$(date -u +%T) pin load $(cat /proc/loadavg)" >> time.log
MALLOC_MMAP_THRESHOLD_=131072 flock /tmp/timing.lock timeout 300 $PY /work/main/tools/bench_steps.py r18t $C --steps 12 --warmup 2 --json time_pin.json > time_pin.txt 2>&1
echo "$(date -u +%T) done load $(cat /proc/loadavg)" >> time.log
