import sys, onnx
from onnxcomp.planner import auto
from onnxcomp.planner.auto import _input_chain, planning_target
MiB = 1 << 20
for path, budget in [("/tmp/peakjump/r18/training_model.onnx", 12), ("/tmp/peakjump/r18/training_model.onnx", 15), ("/tmp/peakjump/r18/training_model.onnx", 20),
                     ("/tmp/lead/W/wide_resnet_s/training_model.onnx", 9.6), ("/tmp/lead/W/mobilenet_v1_s/training_model.onnx", 4.6),
                     ("/tmp/lead/W/leaky_vgg/training_model.onnx", 12), ("/tmp/lead/W/squeezenet_s/training_model.onnx", 3.8),
                     ("/tmp/lead/W/plain_deep/training_model.onnx", 5.2), ("/tmp/lead/W/densenet_s/training_model.onnx", 31)]:
    m = onnx.load(path, load_external_data=False)
    t = planning_target(int(budget * MiB))
    out = [_input_chain(m, t)] + [_input_chain(m, t, further=True, at_least=a) for a in (2, 3, 4, 5, 6)]
    print(path.split("/")[-2], budget, out)
