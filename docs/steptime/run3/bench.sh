#!/bin/bash
# usage: bench.sh NAME MODEL(r18|vgg) ALLOC(glibc|pinned) THREADS(default|1) STEPS WARMUP CONFIG...
# One timing hold (<= 3 min: inner timeout 175 s) of tools/bench_steps.py, interleaved configs.
set -u
name=$1 model=$2 alloc=$3 threads=$4 steps=$5 warmup=$6; shift 6
out=/work/wt/steptime3/docs/steptime/run3
targs=(); [ "$threads" = 1 ] && targs=(--threads 1)
env=(); [ "$alloc" = pinned ] && env=(MALLOC_MMAP_THRESHOLD_=131072)
echo "# $(date -u +%H:%M:%S) $name: uptime before: $(uptime)" > $out/$name.txt
cmd=(env "${env[@]}" PYTHONPATH=/work/wt/steptime3 flock /tmp/timing.lock timeout 175 nice -n 0
     /work/main/.venv/bin/python /work/wt/steptime3/tools/bench_steps.py /tmp/steptime3/$model "$@"
     --steps $steps --warmup $warmup "${targs[@]}" --json $out/$name.json)
echo "# ${cmd[*]}" >> $out/$name.txt
"${cmd[@]}" >> $out/$name.txt 2>&1
echo "# rc=$? $(date -u +%H:%M:%S) uptime after: $(uptime)" >> $out/$name.txt
cat $out/$name.txt
