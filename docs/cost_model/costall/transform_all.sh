#!/bin/bash
echo 15 > /proc/self/autogroup 2>/dev/null
export PYTHONPATH=/work/wt/costall
cd /work/wt/costall
PY=/work/main/.venv/bin/python
for spec in "$@"; do
  m=${spec%%:*}; rest=${spec#*:}; p=${rest%%:*}; b=${rest#*:}
  d=/tmp/costall/$m
  if [ "$p" = auto ]; then out=$d/auto-exact-$b.onnx; extra="--policy auto --exact --budget $b"; else out=$d/$p.onnx; extra="--policy $p"; fi
  [ -e $out ] && continue
  t0=$(date +%s)
  nice -n 15 $PY -m onnxcomp transform $d -o $out $extra --json > $out.log 2>&1 
  echo "$m $p $b rc=$? $(( $(date +%s)-t0 )) s"
done
