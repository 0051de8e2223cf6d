#!/bin/bash
# peaks: pinned (measure's settings) and ORT defaults, with and without glibc.malloc.hugetlb=1
echo 15 > /proc/self/autogroup 2>/dev/null
cd /work/main
OUT=/tmp/pinfault/peaks; D=/tmp/pinfault/r2
for rep in 1 2; do
for g in training_model main-lossless main-dpr-fp16 main-comet; do
  for thp in 0 1; do
    if [ $thp = 1 ]; then export GLIBC_TUNABLES=glibc.malloc.hugetlb=1; else unset GLIBC_TUNABLES; fi
    MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/pinfault nice -n 15 .venv/bin/python -m onnxcomp measure $D --model $g.onnx --steps 3 --json > $OUT/$g-thp$thp-pin-$rep.json 2>/dev/null
    PYTHONPATH=/work/wt/pinfault nice -n 15 .venv/bin/python -m onnxcomp measure $D --model $g.onnx --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $OUT/$g-thp$thp-ort-$rep.json 2>/dev/null
  done
done
done
echo done
