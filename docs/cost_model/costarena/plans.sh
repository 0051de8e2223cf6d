#!/bin/bash
# usage: plans.sh TAG TREE [XDG]   -- transform the README's auto budgets with TREE's code, then measure step peaks
echo 15 > /proc/self/autogroup 2>/dev/null
tag=$1; tree=$2; xdg=${3:-/tmp/costarena/noxdg}
mkdir -p /tmp/costarena/plans/$tag $xdg
export PYTHONPATH=$tree XDG_CACHE_HOME=$xdg
PY=/work/main/.venv/bin/python
for spec in resnet18:--exact:31.7MiB resnet18::15MiB mobilenet_v2:--exact:73.6MiB vgg16:--exact:184MiB; do
  IFS=: read m ex b <<< "$spec"
  out=/tmp/costarena/plans/$tag/${m}_${ex#--}_$b
  t0=$(date +%s)
  nice -n 15 $PY -m onnxcomp transform /work/ref/$m -o $out --policy auto $ex --budget $b --json > $out.transform.json 2> $out.transform.err
  echo "$tag $m $ex $b transform rc=$? $(( $(date +%s)-t0 )) s"
  MALLOC_MMAP_THRESHOLD_=131072 nice -n 15 $PY -m onnxcomp measure $out --steps 3 --json > $out.measure.json 2> $out.measure.err
  echo "$tag $m $ex $b measure rc=$? $(python3 -c "import json;d=json.load(open('$out.measure.json'));print({k:d.get(k) for k in ('peak_bytes','step_time_s')})" 2>&1 | tail -1)"
done
