#!/bin/bash
cd /tmp/lead/s37
PY=/work/main/.venv/bin/python
C="baseline=training_model.onnx lossless=vgg_lossless.onnx dpr-fp16=vgg_dpr-fp16.onnx comet=vgg_comet.onnx"
echo "$(date -u +%T) vgg glibc load $(cat /proc/loadavg)" >> time.log
flock /tmp/timing.lock timeout 330 $PY /work/main/tools/bench_steps.py vggt $C --steps 6 --warmup 1 --json timevgg_glibc.json > timevgg_glibc.txt 2>&1
echo "$(date -u +%T) vgg pin load $(cat /proc/loadavg)" >> time.log
MALLOC_MMAP_THRESHOLD_=131072 flock /tmp/timing.lock timeout 330 $PY /work/main/tools/bench_steps.py vggt $C --steps 6 --warmup 1 --json timevgg_pin.json > timevgg_pin.txt 2>&1
echo "$(date -u +%T) vgg done load $(cat /proc/loadavg)" >> time.log
