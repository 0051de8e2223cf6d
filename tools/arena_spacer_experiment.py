"""Experiment (not product code): add one trainable "spacer" parameter of N floats, last among the parameters, so
ORT's Module allocates one more gradient buffer at set-up (the free chunk its region leaves takes the step's
convolution scratch: no second pattern region). Its gradient is Sub(p, p) = 0 accumulated as usual; the loss does
not read it. SRC DST N."""
import shutil, sys
import numpy as np, onnx
from onnx import helper, TensorProto
from onnxruntime.training.api import CheckpointState
from onnxruntime.training.onnxblock.checkpoint_utils import save_checkpoint

src, dst = sys.argv[1], sys.argv[2]
sizes = [int(x) // 4 for x in sys.argv[3].split(",")]   # bytes -> floats
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst)
m = onnx.load(f"{dst}/training_model.onnx")
g = m.graph
e = onnx.load(f"{dst}/eval_model.onnx")
state = CheckpointState.load_checkpoint(f"{src}/checkpoint")
trainable, frozen = [], []
for name, p in state.parameters:
    (trainable if p.requires_grad else frozen).append(onnx.numpy_helper.from_array(np.asarray(p.data), name))
for j, n in enumerate(sizes):
    P = f"onnxcomp_arena_spacer{j}"
    buf = P + "_grad.accumulation.buffer"
    ins = list(g.input)
    names = [i.name for i in ins]
    last_param = max(k for k, i in enumerate(ins) if i.name + "_grad.accumulation.buffer" in names)
    last_buf = max(k for k, i in enumerate(ins) if i.name.endswith("_grad.accumulation.buffer"))
    ins.insert(last_buf + 1, helper.make_tensor_value_info(buf, TensorProto.FLOAT, [n]))
    ins.insert(last_param + 1, helper.make_tensor_value_info(P, TensorProto.FLOAT, [n]))
    del g.input[:]; g.input.extend(ins)
    g.node.extend([helper.make_node("Sub", [P, P], [P + "_grad"], name=f"SpacerGrad{j}"),
                   helper.make_node("InPlaceAccumulatorV2", [buf, P + "_grad", "lazy_reset_grad"],
                                    [P + "_grad.accumulation.out"], domain="com.microsoft", name=f"SpacerAccumulator{j}")])
    g.output.append(helper.make_tensor_value_info(P + "_grad.accumulation.out", TensorProto.BOOL, [1]))
    trainable.append(onnx.numpy_helper.from_array(np.zeros(n, np.float32), P))
    e.graph.input.append(helper.make_tensor_value_info(P, TensorProto.FLOAT, [n]))
onnx.save(m, f"{dst}/training_model.onnx")
onnx.save(e, f"{dst}/eval_model.onnx")
import os; os.remove(f"{dst}/checkpoint")
save_checkpoint((trainable, frozen), f"{dst}/checkpoint")
print("ok", dst)
