#!/bin/bash
# usage: scan.sh MODE(ort-defaults|ort-defaults-total) NET... ; exact plans at the tightest accepted budget, --verify,
# baseline re-measured in the same run, independent measure of the written plan (ORT defaults).
mode=$1; shift
D=/tmp/setupfree/S/$mode; mkdir -p $D; cd $D
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/setupfree
PY=/work/main/.venv/bin/python
W=/tmp/setupfree/W
ORT="--steps 3 --json --arena --mem-pattern --mem-reuse --order default"
for n in "$@"; do
  echo "$(date -u +%T) scan $mode $n load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/wt/setupfree rev-parse --short HEAD) dirty $(git -C /work/wt/setupfree status --porcelain | wc -l)" >> scan.log
  nice -n 10 $PY -m onnxcomp measure $W/$n $ORT > $n.base.ortdef.json 2>$n.base.err
  nice -n 10 $PY -m onnxcomp inspect $W/$n --budget 64KiB --budget-for $mode --exact --json > $n.scan.json 2> $n.scan.err
  tb=$($PY -c "import json;print(json.load(open('$n.scan.json'))['auto']['ort_defaults']['tightest_growth_budget_bytes'])")
  echo "$(date -u +%T) tightest $tb" >> scan.log
  nice -n 10 $PY -m onnxcomp transform $W/$n -o ${n}_exact --force --policy auto --exact --budget ${tb}B --budget-for $mode --verify --json > $n.transform.json 2> $n.transform.err
  rc=$?; echo "$(date -u +%T) transform rc=$rc" >> scan.log
  nice -n 10 $PY -m onnxcomp measure ${n}_exact $ORT > ${n}_exact.ortdef.json 2>${n}_exact.ortdef.err
  echo "$(date -u +%T) measured" >> scan.log
done
echo "$(date -u +%T) done" >> scan.log
