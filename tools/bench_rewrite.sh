#!/usr/bin/env bash
# Before/after table for the rewrite layer: transform every policy with one onnxcomp build and measure it.
# usage: tools/bench_rewrite.sh ONNXCOMP_BIN WORKDIR TAG MODEL [POLICY...]
# Artifacts are generated once per model under WORKDIR/MODEL (shared by every build, so losses compare);
# results go to WORKDIR/MODEL/TAG/{P.onnx, P.measure.json, P.transform_s}.
set -u
bin=$1 work=$2 tag=$3 model=$4; shift 4
policies=${*:-"lossless lossless-encode recompute rows reorder dpr-fp16 dpr-bf16 dpr-fp10 dpr-fp8 comet"}
art=$work/$model
if [ ! -f "$art/training_model.onnx" ]; then
  "$bin" artifacts --model "$model" --batch 32 --image 64 --classes 1000 -o "$art" || exit 1
fi
mkdir -p "$art/$tag"
if [ ! -f "$art/$tag/baseline.measure.json" ]; then
  "$bin" measure "$art" --steps 4 --json > "$art/$tag/baseline.measure.json" 2> "$art/$tag/baseline.err"
fi
for p in $policies; do
  out=$art/$tag/$p.onnx
  start=$(date +%s.%N)
  "$bin" transform "$art" -o "$out" --policy "$p" --force --json > "$art/$tag/$p.transform.json" 2> "$art/$tag/$p.transform.err"
  end=$(date +%s.%N)
  echo "$end - $start" | bc > "$art/$tag/$p.transform_s"
  "$bin" measure "$art" --model "$out" --steps 4 --json > "$art/$tag/$p.measure.json" 2> "$art/$tag/$p.err"
  echo "$model $tag $p transform $(cat "$art/$tag/$p.transform_s")s rc=$?"
done
