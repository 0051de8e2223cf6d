#!/bin/bash
# Interleaved A/B timings, one lock hold (<= 175 s) per run; then peaks (niced, no lock).
cd /tmp/pinfault
export PYTHONPATH=/work/wt/pinfault
PY=/work/main/.venv/bin/python
B=/work/wt/pinfault/tools/bench_steps.py
ALL="baseline=training_model.onnx dpr-fp16=main-dpr-fp16.onnx dpr-fp16-br=br-dpr-fp16.onnx dpr-fp8=main-dpr-fp8.onnx dpr-fp8-br=br-dpr-fp8.onnx comet=main-comet.onnx comet-br=br-comet.onnx"
SIX="baseline=training_model.onnx lossless=main-lossless.onnx dpr-fp16=main-dpr-fp16.onnx dpr-fp16-br=br-dpr-fp16.onnx comet=main-comet.onnx comet-br=br-comet.onnx"
bench() {  # name, env, args...
  name=$1; shift; envs=$1; shift
  flock /tmp/timing.lock sh -c "echo start \$(date -u +%T) \$(cat /proc/loadavg); env $envs timeout 175 nice -n 0 $PY $B r18 $* --json out/$name.json; echo end \$(date -u +%T) \$(cat /proc/loadavg)" > out/$name.txt 2>&1
}
bench r18_pinned_t1_B "MALLOC_MMAP_THRESHOLD_=131072" $ALL --steps 5 --warmup 1 --threads 1
bench r18_glibc_t1_B "X=1" $ALL lossless=main-lossless.onnx --steps 4 --warmup 1 --threads 1
bench r18_pinned_C "MALLOC_MMAP_THRESHOLD_=131072" $SIX --steps 4 --warmup 1
bench r18_glibc_C "X=1" $SIX --steps 4 --warmup 1
echo 15 > /proc/self/autogroup
for V in main nomlp; do MALLOC_MMAP_THRESHOLD_=131072 nice -n 15 timeout 400 $PY -m onnxcomp measure vgg --model $V-dpr-fp16.onnx --steps 3 --json > out/vggpeak-$V.json 2>/dev/null; done
echo done > out/runall.done
