"""Runtime plumbing: session options, the PyOp fast hook, and the child-process memory measurement."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import TEST_OP, build_small_artifacts
from onnx import TensorProto, helper

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime import pyops
from onnxcomp.runtime.measure import _describe_exit, measure
from onnxcomp.runtime.session import RuntimeSettings, session_options


@pytest.fixture(scope="module")
def batch32_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same net at batch 32: several times the activations of small_artifacts."""
    return build_small_artifacts(tmp_path_factory.mktemp("batch32"), batch=32)


def _test_op_model(shape: list[int]) -> bytes:
    node = helper.make_node(TEST_OP, ["x"], ["y", "s"], domain="ai.onnx.contrib", scale=2.5)
    relu = helper.make_node("Relu", ["y"], ["z"])
    graph = helper.make_graph(
        [node, relu], "pyop_test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("s", TensorProto.INT64, [len(shape)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.contrib", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def test_runtime_settings_roundtrip_and_validation() -> None:
    s = RuntimeSettings(arena=True, execution_order="default", intra_threads=1)
    assert RuntimeSettings.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    so = s.session_options()
    assert so.enable_cpu_mem_arena and not so.enable_mem_pattern
    assert so.execution_order == ort.ExecutionOrder.DEFAULT and so.intra_op_num_threads == 1
    assert session_options().execution_order == ort.ExecutionOrder.PRIORITY_BASED
    with pytest.raises(OnnxcompError, match="execution order"):
        RuntimeSettings(execution_order="fastest")
    with pytest.raises(OnnxcompError, match="unknown runtime setting"):
        RuntimeSettings.from_dict({"arena": True, "bogus": 1})


def test_pyop_runs_with_fast_hook() -> None:
    shape = [32, 100, 1000]  # 12.8 MB: the stock .tolist() hook takes ~0.27 s here, ours ~5 ms
    sess = ort.InferenceSession(_test_op_model(shape), session_options(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    calls = pyops.calls
    z, s = sess.run(None, {"x": x})
    assert pyops.fast_hook_installed() and pyops.calls == calls + 1  # our hook served the call
    # The op returns a non-contiguous view; the hook must hand ORT the values in logical order.
    np.testing.assert_array_equal(z, np.maximum(x * np.float32(2.5), 0))
    assert s.dtype == np.int64 and s.tolist() == shape


def test_codec_ops_absence_tolerated_only_for_that_module(monkeypatch: pytest.MonkeyPatch) -> None:
    pyops.import_op_definitions()  # codec_ops may or may not exist yet; both are fine
    monkeypatch.setattr(pyops, "_codec_imported", False)
    monkeypatch.setattr(pyops, "CODEC_OPS_MODULE", "onnxcomp.runtime._no_such_codec_module")
    pyops.import_op_definitions()
    monkeypatch.setattr(pyops, "CODEC_OPS_MODULE", "onnxcomp.runtime._measure_worker_missing.sub")
    with pytest.raises(ModuleNotFoundError):  # a missing *parent/dependency* is a real error
        pyops.import_op_definitions()


def test_late_pyop_definition_is_refused() -> None:
    # In a child: a PyOp defined after registration would poison this test process.
    code = textwrap.dedent("""
        from onnxruntime_extensions import onnx_op, PyCustomOpDef
        from onnxcomp.errors import OnnxcompError
        from onnxcomp.runtime.session import session_options
        session_options()
        @onnx_op(op_type="OnnxcompLateOp", domain="ai.onnx.contrib")
        def late(x): return x
        try:
            session_options()
        except OnnxcompError as e:
            print("refused:", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused:" in out.stdout and "OnnxcompLateOp" in out.stdout


def test_measure_small(small_artifacts: Path, batch32_artifacts: Path) -> None:
    settings = RuntimeSettings()
    small = measure(small_artifacts, steps=3, settings=settings)
    big = measure(batch32_artifacts, steps=3, settings=settings)
    for r in (small, big):
        assert len(r.losses) == 3 and all(math.isfinite(v) for v in r.losses)
        assert r.settings == settings.to_dict() and r.step_time_s > 0 and r.rss_setup_bytes > 0
        assert r.growth_bytes > 0
        d = json.loads(json.dumps(r.to_dict()))
        assert {"peak_bytes", "step_time_s", "losses", "settings"} <= set(d)
        assert r.extras["malloc_mmap_threshold"] == "131072"
    # Batch 32 stashes 8x the activations: its step peak must be clearly larger, and hold at least half of
    # the stashes that malloc maps fresh (>= 128 KiB: the pinned mmap threshold), alive together at the turn.
    assert big.peak_bytes > 2 * small.peak_bytes
    from onnxcomp.analysis import analyze

    mapped = sum(s.nbytes for s in analyze(batch32_artifacts).stashed if s.nbytes >= 128 << 10)
    assert mapped > 0 and big.peak_bytes >= mapped // 2


def test_measure_is_seeded(small_artifacts: Path) -> None:
    a = measure(small_artifacts, steps=2, settings=RuntimeSettings(arena=True, mem_pattern=True), seed=1)
    b = measure(small_artifacts, steps=2, settings=RuntimeSettings(), seed=1)
    assert a.losses == b.losses and a.losses[0] != a.losses[1]  # data varies per step, not per setting


def test_measure_errors(small_artifacts: Path, tmp_path: Path) -> None:
    with pytest.raises(OnnxcompError, match="not found"):
        measure(small_artifacts, model="no_such_model.onnx")
    with pytest.raises(OnnxcompError, match="does not exist"):
        measure(tmp_path / "missing_dir")
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(b"not an onnx model")
    with pytest.raises(OnnxcompError, match="not a readable ONNX model"):  # checked before a child starts
        measure(small_artifacts, model=bad, steps=1)
    assert _describe_exit(-11) == "killed by signal SIGSEGV" and _describe_exit(1) == "exit code 1"


def test_measure_reports_native_crash(small_artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stand in for a native crash: the child kills itself with SIGSEGV before measuring.
    import onnxcomp.runtime.measure as m

    real_run = subprocess.run

    def crashing_run(cmd, **kw):  # type: ignore[no-untyped-def]
        cmd = [sys.executable, "-c", "import os, signal, sys; sys.stderr.write('boom\\n'); "
               "os.kill(os.getpid(), signal.SIGSEGV)"]
        return real_run(cmd, **kw)

    monkeypatch.setattr(m.subprocess, "run", crashing_run)
    with pytest.raises(OnnxcompError, match="SIGSEGV.*boom"):
        measure(small_artifacts, steps=1)


def test_onnx_model_is_loadable(small_artifacts: Path) -> None:
    # The fixture's training graph loads into ORT's training API with the inputs the runtime feeds.
    from onnxruntime.training import api

    state = api.CheckpointState.load_checkpoint(str(small_artifacts / "checkpoint"))
    module = api.Module(str(small_artifacts / "training_model.onnx"), state, None, "cpu",
                        RuntimeSettings().session_options())
    assert module.input_names()[:2] == ["input", "labels"]
    assert len(module.output_names()) == 1 and module.get_parameters_size() > 0
