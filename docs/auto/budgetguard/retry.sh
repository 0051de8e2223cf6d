#!/bin/bash
# where `transform --verify` at the predictor's tightest budget exits 2 naming the lowest measured growth M:
# the tightest budget --verify accepts is tried at M + 1 % (run-to-run noise of measure is ~0.1 MiB).
# usage: retry.sh exact|lossy NET
mode=$1; n=$2
D=/tmp/budgetguard/S/$([ $mode = exact ] && echo X || echo L)
cd $D
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/budgetguard
PY=/work/main/.venv/bin/python
W=/tmp/budgetguard/W
EX=$([ $mode = exact ] && echo --exact)
m=$(grep -o "lowest measured is [0-9.]* MiB" $n.$mode.transform.err | grep -o "[0-9.]*")
tb=$(python3 -c "print(int($m * 1.01 * 2**20))")
echo "$(date -u +%T) retry $mode $n at lowest measured $m MiB + 1 %: ${tb}B load $(cut -d' ' -f1 /proc/loadavg) head $(git -C /work/wt/budgetguard rev-parse --short HEAD)" >> scan.log
cp $n.$mode.transform.err $n.$mode.transform.first.err
nice -n 10 $PY -m onnxcomp transform $W/$n -o ${n}_$mode --force --policy auto $EX --budget ${tb}B --budget-for ort-defaults --verify --json > $n.$mode.transform.json 2> $n.$mode.transform.err
echo "$(date -u +%T) transform rc=$?" >> scan.log
nice -n 10 $PY -m onnxcomp measure ${n}_$mode --steps 3 --json --arena --mem-pattern --mem-reuse --order default > ${n}_$mode.ortdef.json 2>${n}_$mode.ortdef.err
echo "$(date -u +%T) measured" >> scan.log
