"""Measure ORT's memory-pattern block for a tiny graph: arena off, mem pattern on, malloc shim log."""
import os, sys, subprocess
from pathlib import Path
import numpy as np, onnx, onnx.numpy_helper
from onnx import helper, TensorProto

N = 65536
def graph(op, extra_inputs=()):
    dom = "com.microsoft" if op in ("ReluGrad", "Scale", "BiasGelu", "SigmoidGrad") else ""
    nodes = [helper.make_node("Add", ["X", "X"], ["A"]),
             helper.make_node(op, ["A", *extra_inputs], ["B"], domain=dom),
             helper.make_node("ReduceSum", ["B"], ["Y"], keepdims=0)]
    inits = [onnx.numpy_helper.from_array(np.array(2.0, np.float32), "S")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [N])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [])],
                          value_info=[helper.make_tensor_value_info(v, TensorProto.FLOAT, [N]) for v in "AB"], initializer=inits if "S" in extra_inputs else [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])

def child(path):
    import onnxruntime as ort
    so = ort.SessionOptions(); so.enable_cpu_mem_arena = False; so.enable_mem_pattern = True
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    fd = os.open(os.environ["MALLOC_LOG_FILE"], os.O_WRONLY | os.O_APPEND)
    x = np.ones(N, np.float32)
    for i in range(2):
        os.write(fd, f"STEP {i}\n".encode()); s.run(None, {"X": x})
    os.write(fd, b"END\n")

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2]); sys.exit()
    shim = Path("malloc_log.so")
    if not shim.exists():
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(shim), "/work/wt/finalgate/tools/malloc_log.c"], check=True)
    for op, extra in [("ReluGrad", ["X"]), ("Abs", []), ("Reciprocal", []), ("Exp", []), ("Floor", []), ("Sigmoid", []), ("Tanh", []), ("Dropout", []), ("Scale", ["S"]), ("Softmax", []), ("Relu", []), ("Neg", []), ("Sqrt", []), ("Clip", []), ("Sum", ["X"])]:
        m = graph(op, extra)
        if op == "Cast":
            m.graph.node[1].attribute.append(helper.make_attribute("to", TensorProto.FLOAT))
            m = graph(op, extra); m.graph.node[1].attribute.append(helper.make_attribute("to", TensorProto.INT32))
            m.graph.value_info[1].type.tensor_type.elem_type = TensorProto.INT32
            m.graph.node[2].op_type = "ReduceSum"
            m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
        p = f"g_{op}.onnx"; onnx.save(m, p)
        log = Path(f"log_{op}.txt"); log.write_text("")
        env = {**os.environ, "LD_PRELOAD": str(shim.resolve()), "MALLOC_LOG_FILE": str(log.resolve()), "MALLOC_LOG_MIN": "65536"}
        subprocess.run([sys.executable, __file__, "--child", p], env=env, check=True)
        lines = log.read_text().splitlines()
        s, e = lines.index("STEP 1"), lines.index("END")
        al = [int(l.split()[1]) for l in lines[s+1:e] if l.startswith("A ")]
        print(op, "step allocations", al, "(one buffer = %d B)" % (N * 4))
