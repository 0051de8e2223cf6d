# the stored measured rounds, as tools/fit_codec_instep.py --round arguments (run from the worktree root)
D=docs/cost_model
ROUNDS="--round Q $D/costquiet/q_mobilenet_v2_measure.json $D/costquiet/q_mobilenet_v2_ort-default.json $D/costquiet/q_resnet18_measure.json $D/costquiet/q_resnet18_ort-default.json $D/costquiet/q_vgg16_measure.json $D/costquiet/q_vgg16_ort-default.json
 --round A-r18 $D/costfit/r18_measure.raw.json $D/costfit/r18_ort.raw.json
 --round A-r18b $D/costfit/r18b_measure.raw.json $D/costfit/r18b_ort.raw.json
 --round A-quiet $D/costall/quiet_end_repointed.json
 --round B-r1a $(ls $D/costarena/r1a_*.json | tr '\n' ' ')
 --round B-r1b $(ls $D/costarena/r1b_*.json | tr '\n' ' ')
 --round B-r2a $(ls $D/costarena/r2a_*.json | tr '\n' ' ')
 --round B-r2b $(ls $D/costarena/r2b_*.json | tr '\n' ' ')
 --round C-b $(ls $D/costall/b_*.json | tr '\n' ' ')
 --round C-r2 $(ls $D/costall/r2_*.json | tr '\n' ' ')"
