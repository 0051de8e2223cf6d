#!/bin/bash
# one round of chunks; $1 = suffix for the JSON files (round id)
r=$1
B=/tmp/costall/bench.sh
for st in ort-default; do
  setsid -w $B mobilenet_v2 $st /tmp/costall/b_mnv2_${st}$r.json rows lossless recompute comet
  setsid -w $B mobilenet_v2 $st /tmp/costall/b_mnv2_${st}$r.json dpr-fp16 dpr-fp8 zfp-8
  setsid -w $B vgg16 $st /tmp/costall/b_vgg_${st}$r.json rows lossless recompute
  setsid -w $B vgg16 $st /tmp/costall/b_vgg_${st}$r.json comet dpr-fp16
  setsid -w $B vgg16 $st /tmp/costall/b_vgg_${st}$r.json dpr-fp8 zfp-8
done
