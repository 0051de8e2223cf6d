#!/bin/bash
cd /tmp/lossygrowth
while ! grep -q done V/run_main.log; do sleep 5; done
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/lossygrowth
PY=/work/main/.venv/bin/python
for sb in 10843000 9343000; do
echo "$(date -u +%T) mob cand $sb load $(cut -d' ' -f1 /proc/loadavg)" >> R/scan.log
nice -n 10 $PY -m onnxcomp transform W/mobilenet_v1_s -o R/mob_step$sb --policy auto --budget ${sb}B --json > R/mob_step$sb.transform.json 2> R/mob_step$sb.transform.err
nice -n 10 $PY -m onnxcomp measure R/mob_step$sb --steps 3 --json --arena --mem-pattern --mem-reuse --order default > R/mob_step$sb.ortdef.json 2>/dev/null
done
echo "$(date -u +%T) mob cand done" >> R/scan.log
