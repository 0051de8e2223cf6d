#!/bin/bash
# usage: bench1.sh MODEL TAG ALLOC(glibc|pinned) STEPS config...
m=$1; tag=$2; alloc=$3; steps=$4; shift 4
cd /work/wt-steptime
uptime
if [ $alloc = pinned ]; then export MALLOC_MMAP_THRESHOLD_=131072; fi
timeout 295 .venv/bin/python tools/bench_steps.py /tmp/steptime/$m "$@" --steps $steps --warmup 1 --json /tmp/steptime/out/$m-$tag-$alloc.json
uptime
