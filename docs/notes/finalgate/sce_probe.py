import os, sys, subprocess
from pathlib import Path
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
N, C = 4096, 10
def graph(variant):
    nodes = [helper.make_node("Add", ["X", "X"], ["A"]),
             helper.make_node("SoftmaxCrossEntropyLoss", ["A", "L"], ["loss", "lp"], reduction="mean"),
             helper.make_node("SoftmaxCrossEntropyLossGrad", ["dl", "lp", "L"], ["g"], domain="com.microsoft", reduction="mean"),
             helper.make_node("Reshape", ["g", "flat"], ["gf"]),
             helper.make_node("Sigmoid", ["gf"], ["E"]),
             helper.make_node("ReduceSum", ["E"], ["Y"], keepdims=0)]
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, []), helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    if variant == "noloss":
        outs = outs[:1]
    inits = [numpy_helper.from_array(np.array([N * C], np.int64), "flat"), numpy_helper.from_array(np.array(1.0, np.float32), "dl")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [N, C]),
                                       helper.make_tensor_value_info("L", TensorProto.INT64, [N])], outs,
                          initializer=inits,
                          value_info=[helper.make_tensor_value_info("A", TensorProto.FLOAT, [N, C]), helper.make_tensor_value_info("lp", TensorProto.FLOAT, [N, C]),
                                      helper.make_tensor_value_info("g", TensorProto.FLOAT, [N, C]), helper.make_tensor_value_info("gf", TensorProto.FLOAT, [N * C]),
                                      helper.make_tensor_value_info("E", TensorProto.FLOAT, [N * C])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
def child(path):
    import onnxruntime as ort
    so = ort.SessionOptions(); so.enable_cpu_mem_arena = False; so.enable_mem_pattern = True
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    fd = os.open(os.environ["MALLOC_LOG_FILE"], os.O_WRONLY | os.O_APPEND)
    feeds = {"X": np.ones((N, C), np.float32), "L": np.zeros(N, np.int64)}
    for i in range(2):
        os.write(fd, f"STEP {i}\n".encode()); s.run(["Y"], feeds)
    os.write(fd, b"END\n")
if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2]); sys.exit()
    shim = Path("/tmp/finalgate/exp/malloc_log.so")
    from onnxcomp.planner.ort_pattern import predict_pattern_block
    for v in ["loss", "noloss"]:
        p = f"g_{v}.onnx"; onnx.save(graph(v), p)
        log = Path(f"log_{v}.txt"); log.write_text("")
        env = {**os.environ, "LD_PRELOAD": str(shim), "MALLOC_LOG_FILE": str(log.resolve()), "MALLOC_LOG_MIN": "65536"}
        subprocess.run([sys.executable, __file__, "--child", p], env=env, check=True)
        lines = log.read_text().splitlines(); s, e = lines.index("STEP 1"), lines.index("END")
        print(v, "measured step allocations", [int(l.split()[1]) for l in lines[s+1:e] if l.startswith("A ")],
              "predicted", predict_pattern_block(p).size, "(one tensor", N * C * 4, ")")
