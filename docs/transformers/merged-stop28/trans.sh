#!/bin/bash
echo 15 > /proc/self/autogroup
cd /work/main
for spec in "vit_tiny dpr-fp8-src16" "vit_tiny dpr-fp8" "vit_tiny lossless" "gpt_tiny lossless" "gpt_tiny dpr-fp8"; do
  set -- $spec; m=$1; p=$2
  rm -rf /tmp/lead/t_${m}_$p
  nice -n 15 .venv/bin/onnxcomp transform /work/ref/$m -o /tmp/lead/t_${m}_$p --policy $p > /tmp/lead/t_${m}_$p.log 2>&1
  MALLOC_MMAP_THRESHOLD_=131072 nice -n 15 .venv/bin/onnxcomp measure /tmp/lead/t_${m}_$p --steps 3 --json --arena --mem-pattern --mem-reuse --order default > /tmp/lead/t_${m}_$p.default.json 2>/dev/null
  echo "$m $p done $(date)"
done
