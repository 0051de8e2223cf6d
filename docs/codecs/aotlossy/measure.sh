#!/bin/bash
# main vs aotlossy, ORT defaults, process peak / growth / codec_kernel_bytes
cd /tmp/aotlossy
export MALLOC_MMAP_THRESHOLD_=131072
PY=/work/main/.venv/bin/python
ORT="--arena --mem-pattern --mem-reuse --order default"
mkdir -p M
run() { # tag dir
  echo "$(date -u +%T) $1 load $(cut -d' ' -f1 /proc/loadavg)" >> M/log
  PYTHONPATH=/work/main nice -n 10 $PY -m onnxcomp measure $2 --steps 3 --json $ORT > M/$1.main.json 2>M/$1.main.err
  PYTHONPATH=/tmp/aotlossy/shim:/work/wt/aotlossy nice -n 10 $PY -m onnxcomp measure $2 --steps 3 --json $ORT > M/$1.aot.json 2>M/$1.aot.err
}
for d in "$@"; do run $(basename $d) $d; done
echo "$(date -u +%T) done" >> M/log
