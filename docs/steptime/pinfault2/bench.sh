#!/bin/bash
# bench.sh NAME ENVKIND STEPS WARMUP [extra bench args] -- CONFIGS...
# ENVKIND: glibc | pinned | thp (pinned + glibc.malloc.hugetlb=1)
NAME=$1; KIND=$2; STEPS=$3; WARM=$4; shift 4
D=${D:-/tmp/pinfault/r2}
case $KIND in
  glibc) ENVS="";;
  pinned) ENVS="MALLOC_MMAP_THRESHOLD_=131072";;
  thp) ENVS="MALLOC_MMAP_THRESHOLD_=131072 GLIBC_TUNABLES=glibc.malloc.hugetlb=1";;
  glibcthp) ENVS="GLIBC_TUNABLES=glibc.malloc.hugetlb=1";;
esac
cd /work/wt/pinfault
echo "== $NAME $KIND $(date -u +%H:%M:%S) $(uptime)"
env $ENVS PYTHONPATH=/work/wt/pinfault flock /tmp/timing.lock timeout 175 nice -n 0 /work/main/.venv/bin/python tools/bench_steps.py $D "$@" --steps $STEPS --warmup $WARM --json /tmp/pinfault/out/$NAME.json 2>&1 | grep -v -i warn
echo "== end $(date -u +%H:%M:%S) $(uptime)"
