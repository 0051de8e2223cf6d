"""The step-peak predictor counts what a codec PyOp holds while it runs (issue 12: a MobileNetV2 lossy plan
predicted 43 MiB and measured 65 MiB, the peak at a q8 encoder of a 12 MiB conv output)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxcomp.analysis import analyze_model
from onnxcomp.custom_ops import REGISTRY
from onnxcomp.planner.buffers import live_bytes
from onnxcomp.planner.predict import predicted_live

SHAPE = (8, 16, 32, 32)   # 512 KiB of float32

# Conv -> Relu -> ReduceSum with the conv output held by a q8 encoder (as EncodeStashPass writes it) and
# decoded for a backward reader.
ENCODED = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1, "ai.onnx.contrib" : 1]>
train (float[8,3,32,32] input, float[16,3,3,3] w1, float loss_grad) => (float loss, float[{','.join(map(str, SHAPE))}] dx)
{{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  codes, lo, scale, shape, anchor = ai.onnx.contrib.OnnxcompEncode_q8 <params="{{\\"layout\\": \\"channels\\", \\"tensor\\": \\"x\\"}}"> (x)
  y = Relu (x)
  loss = ReduceSum <keepdims=0> (y)
  y_shape = Shape (y)
  dy = Expand (loss_grad, y_shape)
  trigger = ReduceSum <keepdims=0> (dy)
  back = ai.onnx.contrib.OnnxcompDecode_q8 <params="{{\\"layout\\": \\"channels\\", \\"tensor\\": \\"x\\"}}"> (codes, lo, scale, shape, trigger)
  dx = com.microsoft.ReluGrad (dy, back)
}}
"""


def _runtime_op_bytes(direction: str, x: np.ndarray) -> int:
    """Bytes the runtime's own q8 op function allocates while it runs (tracemalloc sees NumPy's buffers), plus
    the bridge's copy of its inputs."""
    from onnxcomp.runtime import codec_ops

    codec = REGISTRY["q8"]
    attrs = {"params": '{"layout": "channels", "tensor": "x"}'}
    encode = codec_ops._make_encode(codec)
    inputs: tuple[np.ndarray, ...] = (x,) if direction == "encode" else (*encode(x, **attrs)[:4], np.float32(0))
    op = encode if direction == "encode" else codec_ops._make_decode(codec)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = op(*inputs, **attrs)
        held = tracemalloc.get_traced_memory()[1] - before
        del out
    finally:
        tracemalloc.stop()
    return held + sum(np.asarray(a).nbytes for a in inputs)


@pytest.mark.parametrize("direction", ["encode", "decode"])
def test_codec_op_workspace_is_predicted(direction: str) -> None:
    model = onnx.parser.parse_model(ENCODED)
    seen, live = predicted_live(model, eager_accumulation=False)
    names = [n.op_type for n in seen.graph.node]
    i = names.index("OnnxcompEncode_q8" if direction == "encode" else "OnnxcompDecode_q8")
    graph_only = live_bytes(analyze_model(seen).buffers(), len(names))
    x = np.maximum(np.random.default_rng(1).standard_normal(SHAPE, dtype=np.float32), 0)
    needed = int(graph_only[i]) + _runtime_op_bytes(direction, x)
    # The op's temporaries are several times its tensor: a prediction of the graph's buffers alone misses them.
    assert needed > graph_only[i] + 2 * x.nbytes
    assert live[i] >= 0.95 * needed


_WORKSPACE_PROBE = """
import json
from onnxcomp.planner.predict import _codec_workspace
params = json.dumps({"adaptive": True, "batch": 4, "eb": 0.001, "key": "t", "tensor": "t", "weight": "w"})
print(json.dumps([_codec_workspace(d, "sz", params, (4, 16, 8, 8)) for d in ("encode", "decode")]))
"""


@pytest.mark.slow
def test_codec_workspace_is_the_same_on_a_cold_and_a_warm_kernel_cache(tmp_path) -> None:
    """A plan must not depend on whether numba compiled the codec in this process or loaded it from its cache:
    a cold start once predicted 48 B less than a rerun, so a rerun's plan JSON differed from the first's."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "ONNXCOMP_CODEC_BACKEND": "numba"}
    runs = []
    for seed in ("1", "2"):   # the first run compiles into the empty cache, the second loads from it
        out = subprocess.run([sys.executable, "-c", _WORKSPACE_PROBE], env={**env, "PYTHONHASHSEED": seed},
                             capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert any((tmp_path / "numba").rglob("*.nbi")), "the first run wrote no kernel cache: the test saw no cold start"
    assert runs[0] == runs[1] and all(b > 0 for b in runs[0]), runs
