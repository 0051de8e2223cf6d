#!/bin/bash
# usage: scan.sh SRC TAG  -> inspect tightest, transform, measure (ORT defaults), with PYTHONPATH=worktree
cd /tmp/r18exact2
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/main
PY=/work/main/.venv/bin/python
src=$1; tag=$2
echo "$(date -u +%T) scan $tag load $(cut -d' ' -f1 /proc/loadavg) head main $(git -C /work/main rev-parse --short HEAD)" >> scan.log
nice -n 10 $PY -m onnxcomp inspect $src --budget 64KiB --budget-for ort-defaults --exact --json > $tag.scan.json 2> $tag.scan.err
tb=$($PY -c "import json;print(json.load(open('$tag.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
echo "$(date -u +%T) $tag tightest $tb" >> scan.log
nice -n 10 $PY -m onnxcomp transform $src -o ${tag}_exact --policy auto --exact --budget ${tb}B --budget-for ort-defaults --json > $tag.transform.json 2> $tag.transform.err
echo "$(date -u +%T) $tag transform rc=$?" >> scan.log
nice -n 10 $PY -m onnxcomp measure ${tag}_exact --steps 3 --json --arena --mem-pattern --mem-reuse --order default > ${tag}_exact.ortdef.json 2>${tag}_exact.ortdef.err
echo "$(date -u +%T) $tag measured $($PY -c "import json;d=json.load(open('${tag}_exact.ortdef.json'));print(d['growth_bytes']/2**20, d['losses'])")" >> scan.log
