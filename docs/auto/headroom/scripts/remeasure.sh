#!/bin/bash
cd /tmp/headroom; export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/headroom; PY=/work/main/.venv/bin/python
mkdir -p rm
for r in 1 2; do for t in s39/densenet_s_lossy_ort-defaults dn_fix s39/wide_resnet_s_lossy_ort-defaults wr_fix; do
  o=rm/$(basename $t).r$r.json
  nice -n 10 $PY -m onnxcomp measure $t --steps 3 --json --arena --mem-pattern --mem-reuse --order default > $o 2>/dev/null
  echo "$(date -u +%T) $t r$r load $(cut -d' ' -f1 /proc/loadavg)" >> rm/log
done; done
