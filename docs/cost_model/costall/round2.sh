#!/bin/bash
# round 2: every chunk with the final code; JSONs *_r2.json
B=/tmp/costall/bench.sh
for st in measure ort-default; do
  setsid -w $B resnet18 $st /tmp/costall/r2_r18_$st.json rows lossless recompute comet
  setsid -w $B resnet18 $st /tmp/costall/r2_r18_$st.json dpr-fp16 dpr-fp8 zfp-8 auto-exact-31.7MiB auto-exact-60MiB
  setsid -w $B mobilenet_v2 $st /tmp/costall/r2_mnv2_$st.json rows lossless recompute comet
  setsid -w $B mobilenet_v2 $st /tmp/costall/r2_mnv2_$st.json dpr-fp16 dpr-fp8 zfp-8
  setsid -w $B mobilenet_v2 $st /tmp/costall/r2_mnv2_$st.json auto-exact-73.6MiB auto-exact-150MiB
  setsid -w $B vgg16 $st /tmp/costall/r2_vgg_$st.json rows lossless recompute
  setsid -w $B vgg16 $st /tmp/costall/r2_vgg_$st.json comet dpr-fp16
  setsid -w $B vgg16 $st /tmp/costall/r2_vgg_$st.json dpr-fp8 zfp-8
  setsid -w $B vgg16 $st /tmp/costall/r2_vgg_$st.json auto-exact-450MiB
done
echo ROUND2 DONE
