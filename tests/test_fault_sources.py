"""tools/fault_sources.py: fresh bytes by source (graph analysis) and faults inside onnxcomp's PyOp hook."""
from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import onnx

from onnxcomp.transform import transform


def _tool():  # noqa: ANN202
    path = Path(__file__).parents[1] / "tools" / "fault_sources.py"
    spec = importlib.util.spec_from_file_location("fault_sources", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pyop_counts(path: Path) -> collections.Counter:
    model = onnx.load(str(path))
    return collections.Counter(n.op_type for n in model.graph.node if n.domain == "ai.onnx.contrib")


def test_sources_split_baseline_inserted_and_pyops(small_artifacts: Path, tmp_path: Path) -> None:
    tool = _tool()
    base = small_artifacts / "training_model.onnx"
    same = tool.predicted(base, base, threshold=1)
    assert same["difference"] == {} and same["graph"]
    assert all(k.startswith("baseline node: ") for k in same["graph"])

    out = tmp_path / "comet"
    transform(small_artifacts, out, "comet", min_bytes=0)
    graph = out / "training_model.onnx"
    ops = _pyop_counts(graph)
    assert ops, "comet on the small CNN has PyOp codecs"
    pred = tool.predicted(graph, base, threshold=1)
    # Every PyOp type: its outputs (ORT's buffers) and the bridge's input copies are their own sources.
    for op in ops:
        assert pred["difference"][f"PyOp output (ORT buffer, bridge memcpy): {op}"] > 0
        assert pred["difference"][f"PyOp bridge input copy: {op}"] > 0
    assert any(k.startswith("inserted: ") for k in pred["difference"])
    # A threshold above every tensor: nothing is a fresh mapping.
    assert tool.predicted(graph, base, threshold=1 << 40)["graph"] == {}


def test_measured_counts_every_pyop_call_and_restores_the_hook(small_artifacts: Path, tmp_path: Path) -> None:
    tool = _tool()
    out = tmp_path / "comet"
    transform(small_artifacts, out, "comet", min_bytes=0)
    graph = out / "training_model.onnx"
    from onnxcomp.runtime import pyops

    m = tool.measured(out, graph, steps=1, warmup=1)
    assert m["step_faults_median"] >= 0 and len(m["step_faults"]) == 1
    # One call per PyOp node per step (the hook saw the last step only).
    assert {op: r["calls"] for op, r in m["pyop_hook"].items()} == dict(_pyop_counts(graph))
    assert m["in_hook_faults"] == sum(r["faults"] for r in m["pyop_hook"].values())
    # Uninstalled, the counter sees nothing more: the next step goes through the plain hook only.
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session

    session = open_artifact_session(out, graph, settings=RuntimeSettings())
    spec = graph_data(out, graph, list(session.module.input_names()))
    batches = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    counter = tool.HookFaults(threshold=1)
    counter.install()
    try:
        session.step(*next(batches))
    finally:
        counter.uninstall()
    seen = {op: r["calls"] for op, r in counter.ops.items()}
    assert seen == dict(_pyop_counts(graph))
    before = pyops.calls
    session.step(*next(batches))
    assert pyops.calls - before == sum(seen.values())        # the plain hook ran every op ...
    assert {op: r["calls"] for op, r in counter.ops.items()} == seen   # ... and the counter is out of the path
