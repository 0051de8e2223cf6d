#!/bin/bash
cd /tmp/lead/s40
while pgrep -f "scan.sh squeezenet_s lossy" >/dev/null; do sleep 10; done
mkdir -p X && cd X && cp ../scan.sh . && sed -i 's#cd /tmp/lead/s40$#cd /tmp/lead/s40/X#' scan.sh
for n in plain_deep wide_resnet_s squeezenet_s mobilenet_v1_s densenet_s leaky_vgg; do ./scan.sh $n exact ort-defaults-total; done
