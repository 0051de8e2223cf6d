#!/bin/bash
export PYTHONPATH=/work/wt/sidebyside
PY=/work/main/.venv/bin/python
cd /tmp/sidebyside
nice -n 10 $PY -m onnxcomp artifacts --model resnet18 --batch 32 --image 64 --classes 1000 -o Z/resnet18k > Z/resnet18k.art.log 2>&1
./plan.sh resnet18k
./meas.sh r18k.base Z/resnet18k
./meas.sh r18k.step G/resnet18k_step
./meas.sh r18k.growth G/resnet18k_growth
