#!/bin/bash
# usage: plans.sh TAG TREE  -- transform the exact auto budgets with TREE's code (shipped defaults: empty XDG cache)
echo 15 > /proc/self/autogroup 2>/dev/null
tag=$1; tree=$2
mkdir -p /tmp/costquiet/plans/$tag
export PYTHONPATH=$tree XDG_CACHE_HOME=/tmp/costquiet/noxdg
for spec in resnet18:31.7MiB mobilenet_v2:73.6MiB vgg16:184MiB; do
  IFS=: read m b <<< "$spec"
  out=/tmp/costquiet/plans/$tag/${m}_exact_$b
  t0=$(date +%s)
  nice -n 15 /work/main/.venv/bin/python -m onnxcomp transform /work/ref/$m -o $out --policy auto --exact --budget $b --json > $out.transform.json 2> $out.transform.err
  echo "$tag $m $b transform rc=$? $(( $(date +%s)-t0 )) s $(date -u +%T)"
done
