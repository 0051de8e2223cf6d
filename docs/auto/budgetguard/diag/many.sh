#!/bin/bash
cd /tmp/budgetguard/diag
export MALLOC_MMAP_THRESHOLD_=131072 PYTHONPATH=/work/wt/budgetguard
for n in "$@"; do b=$(basename $n); rm -f $b.mlog
MALLOC_LOG_FILE=/tmp/budgetguard/diag/$b.mlog MALLOC_LOG_MIN=65536 LD_PRELOAD=/tmp/budgetguard/diag/malloc_log.so nice -n 10 /work/main/.venv/bin/python smapsdiff.py /tmp/budgetguard/$n 2>&1 | grep "^step 3" > $b.many.txt
python3 livebig.py $b.mlog >> $b.many.txt
done
