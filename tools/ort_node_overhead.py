"""Diagnosis: the memory ORT's first run keeps per graph node, with and without its memory pattern.

    MALLOC_MMAP_THRESHOLD_=131072 python tools/ort_node_overhead.py N [N ...]

Builds a chain of N tiny elementwise nodes (Mul/Add on a [1, 16] float tensor, shapes declared), opens an
``InferenceSession`` with the CPU arena on, the memory pattern and ORT's buffer reuse each on or off (graph
optimisations off, so the chain stays N nodes), and prints how much the process's RSS grows in the first run and
the second. The tensors are 64 bytes: what grows is ORT's per-node and per-value bookkeeping, which the first run
creates and keeps; it depends on reuse and the pattern (not identified further inside ORT).

Why it matters (docs/notes/lossyr18.md): ``onnxcomp measure --arena --mem-pattern --mem-reuse --order default``
reports the growth over the post-set-up RSS, so that bookkeeping counts, whereas onnxcomp's step peak (peak over
the RSS before a step, after a warm-up) does not see it. Measured here (ORT 1.19.2, 2-core VM, 45,000 nodes):
reuse and pattern on (ORT's defaults) ~370 B per node (15.9 MiB); reuse on, pattern off ~260 B; reuse off,
pattern on ~150 B; both off ~6 B. ResNet-18's ``auto --budget 15MiB`` plan (26 batch chunks through 5 units) is a
45,460-node graph.
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxcomp.runtime.proc_memory import status_bytes

MIB = 2 ** 20


def chain_model(n: int, width: int = 16) -> onnx.ModelProto:
    """x -> Mul -> Add -> Mul ... (n nodes) -> y, every intermediate declared [1, width] float."""
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Add" if i % 2 else "Mul", [prev, "c"], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    info = [helper.make_tensor_value_info(f"t{i}", TensorProto.FLOAT, [1, width]) for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor("c", TensorProto.FLOAT, [1], [1.0])], value_info=info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def first_run_growth(n: int, mem_pattern: bool, mem_reuse: bool = True, width: int = 16) -> tuple[int, int]:
    """(RSS growth in the first run, in the second run) of an n-node chain, in bytes."""
    so = ort.SessionOptions()
    so.enable_cpu_mem_arena = True
    so.enable_mem_pattern = mem_pattern
    so.enable_mem_reuse = mem_reuse
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(chain_model(n, width).SerializeToString(), so,
                                   providers=["CPUExecutionProvider"])
    x = np.ones((1, width), np.float32)
    r0 = status_bytes("VmRSS")
    session.run(None, {"x": x})
    r1 = status_bytes("VmRSS")
    session.run(None, {"x": x})
    return r1 - r0, status_bytes("VmRSS") - r1


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["5000", "20000", "45000"]:
        n = int(arg)
        for reuse in (True, False):
            for pattern in (True, False):
                first, second = first_run_growth(n, pattern, reuse)
                print(f"{n:6d} nodes, mem reuse {'on ' if reuse else 'off'}, pattern {'on ' if pattern else 'off'}: "
                      f"first run +{first / MIB:6.2f} MiB ({first / n:4.0f} B/node), second +{second / MIB:5.2f} MiB")
