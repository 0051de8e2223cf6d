#!/bin/sh
# bench.sh NAME DIR ALLOC(glibc|pinned) THREADS(1|default) STEPS WARMUP CONFIG...  -> NAME.txt / NAME.json here
# (the command line and `uptime` before and after go into NAME.txt)
here=$(dirname "$0"); name=$1; dir=$2; alloc=$3; threads=$4; steps=$5; warmup=$6; shift 6
env=""; [ "$alloc" = pinned ] && env="MALLOC_MMAP_THRESHOLD_=131072"
targ=""; [ "$threads" = 1 ] && targ="--threads 1"
cmd="$env PYTHONPATH=/work/wt/cometstep flock /tmp/timing.lock timeout 178 nice -n 0 /work/main/.venv/bin/python $here/bench_ab.py $dir $* --steps $steps --warmup $warmup $targ --json $here/$name.json"
{ echo "\$ $cmd"; echo "before: $(uptime)"; } > "$here/$name.txt"
eval "$cmd" >> "$here/$name.txt" 2>&1; echo "rc=$?" >> "$here/$name.txt"
echo "after: $(uptime)" >> "$here/$name.txt"
