"""RecomputePass: dropped stashes are rebuilt in backward, bit-identically, just before their reader."""
from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import artifacts_from_net
from onnxcomp.analysis import analyze_model
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes.recompute import RecomputePass
from onnxcomp.runtime.session import RuntimeSettings

STEPS = 5
ORDERS = ("priority", "default")


# -- fixtures: a small residual CNN with BatchNorm, residual Adds and a Dropout -------------------------
def _build_residual_artifacts(out_dir: Path, batch: int = 4, image: int = 16, width: int = 8,
                              dropout: bool = True) -> Path:
    import torch

    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(c)
            self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn2 = torch.nn.BatchNorm2d(c)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + x)

    class ResNetLike(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, width, 3, padding=1, bias=False),
                                            torch.nn.BatchNorm2d(width), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
            self.blocks = torch.nn.Sequential(Block(width), Block(width))
            self.drop = torch.nn.Dropout(0.25) if dropout else torch.nn.Identity()
            self.fc = torch.nn.Linear(width * (image // 2) ** 2, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.drop(torch.flatten(self.blocks(self.stem(x)), 1)))

    meta = {"model": "resnet_like", "batch": batch, "image": [3, image, image], "classes": 10,
            "inputs": ["input"], "labels": "labels"}
    return artifacts_from_net(ResNetLike(), out_dir, batch=batch, in_channels=3, height=image, width=image,
                              meta=meta)


@pytest.fixture(scope="module")
def residual_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_residual_artifacts(tmp_path_factory.mktemp("recompute_residual"))


def _write(where: Path, model: onnx.ModelProto, name: str) -> str:
    """Save beside the test's own files (never into a shared fixture directory); an absolute path."""
    path = where / name
    onnx.save(model, str(path))
    return str(path)


def _assert_bit_identical(art: Path, model_file: str, order: str) -> None:
    from onnxcomp.runtime.train import train

    settings = RuntimeSettings(execution_order=order)
    base = train(art, steps=STEPS, data="synthetic", seed=3, progress=False, return_parameters=True,
                 settings=settings)
    new = train(art, model=model_file, steps=STEPS, data="synthetic", seed=3, progress=False,
                return_parameters=True, settings=settings)
    assert len(set(base.losses)) > 1, "data must vary between steps"
    assert base.losses == new.losses
    # All parameters, BatchNorm running statistics included (a clone updating them would show here).
    assert np.array_equal(base.parameters.view(np.uint32), new.parameters.view(np.uint32))


def _execution_order(art: Path, model_file: str, order: str, tmp_path: Path) -> list[str]:
    """Node names in the order ORT ran them in one training step (from its profiling trace)."""
    from onnxruntime.training import api

    prefix = str(tmp_path / f"prof_{order}")
    state = api.CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = api.Module(model_file, state, None, "cpu",
                        RuntimeSettings(execution_order=order, profile=prefix).session_options())
    module.train()
    meta = json.loads((art / "onnxcomp.json").read_text())
    x = np.random.default_rng(0).standard_normal((meta["batch"], *meta["image"])).astype(np.float32)
    module(x, np.zeros(meta["batch"], np.int64))
    del module
    (trace,) = glob.glob(prefix + "*.json")
    events = json.loads(Path(trace).read_text())
    suffix = "_kernel_time"
    return [e["name"][: -len(suffix)] for e in events
            if e.get("cat") == "Node" and e["name"].endswith(suffix)]


# -- selection and graph structure ------------------------------------------------------------------
def test_default_rule_drops_cheap_stashes(small_artifacts: Path) -> None:
    model = onnx.load(str(small_artifacts / "training_model.onnx"))
    before = analyze_model(model)
    result = RecomputePass().run(model)
    assert result.modified
    after = analyze_model(result.model)
    names = {r["tensor"] for r in result.records}
    # Both ReLU inputs (BN outputs, read by ReluGrad) and the first MaxPool's output and indices.
    assert "/features/features.1/BatchNormalization_output_0" in names
    assert "/features/features.3/MaxPool_output_0" in names
    assert "/features/features.3/MaxPool_output_0_mask" in names
    stashed_after = {s.name for s in after.stashed}
    for r in result.records:
        assert r["encoding"] == "recompute" and r["predicted_bytes"] == 0 and r["original_bytes"] > 0
        assert r["tensor"] not in stashed_after
        # Its buffer now dies in the forward pass, or is not produced at all: a MaxPool's indices, once
        # nothing reads them, are left out (ORT would hold an unread output to the end of the step).
        if r["tensor"].endswith("_mask"):
            assert r["tensor"] not in after.tensors
            pool = next(n for n in result.model.graph.node if n.output[0] == r["tensor"][: -len("_mask")])
            assert list(pool.output) == [pool.output[0]]
        else:
            assert after.lifetime(r["tensor"])[1] < after.boundary.first_backward
        assert r["recomputed_as"] in after.tensors
        assert after.boundary.is_backward(after.tensors[r["recomputed_as"]].producer)
    # No clone output is left unread (ORT would hold it to the end of the step): a recomputed MaxPool read
    # only for its indices has its values released (``_release_unread_clones``).
    # (Per-channel statistics of a BatchNorm clone are below the gate's threshold and stay as they are.)
    assert not [n for n in after.tensors if "__recomputed" in n and after.unread(n) and after.tensors[n].nbytes >= 64 << 10]
    # Conv outputs (not cheap) and BN statistics are kept, with a reason.
    reasons = {s.name: s.reason for s in result.skipped}
    assert "Conv" in reasons["/features/features.0/Conv_output_0"]
    assert "BatchNorm" in reasons["saved_mean_def"]
    assert sum(s.nbytes for s in after.stashed) < sum(s.nbytes for s in before.stashed)
    # The planner's view agrees: the step's transient buffers peak lower.
    from onnxcomp.planner import plan_all

    assert plan_all(after.buffers()).to_dict() != plan_all(before.buffers()).to_dict()
    # Input model untouched.
    assert len(model.graph.node) == len(before.model.graph.node)


def test_nothing_big_is_produced_unread(small_artifacts: Path) -> None:
    """ORT keeps an output nobody reads alive to the end of the step, so the rewrite must not leave any
    (BatchNorm's per-channel running statistics are the only unread outputs, in the original too)."""
    result = RecomputePass().run(onnx.load(str(small_artifacts / "training_model.onnx")))
    graph = result.model.graph
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    after = analyze_model(result.model)
    unread = {o: after.tensors[o].nbytes for n in graph.node for o in n.output if o and o not in read}
    assert unread and max(unread.values()) <= 4 * 64, unread


def test_forward_readers_keep_the_original(small_artifacts: Path) -> None:
    model = onnx.load(str(small_artifacts / "training_model.onnx"))
    result = RecomputePass().run(model)
    nodes = list(result.model.graph.node)
    relu = next(n for n in nodes if n.name == "/features/features.2/Relu")
    assert list(relu.input) == ["/features/features.1/BatchNormalization_output_0"]
    after = analyze_model(result.model)
    for r in result.records:
        readers = [nodes[c] for c in after.tensors[r["recomputed_as"]].consumers]
        assert readers and all(after.boundary.is_backward(c) for c in after.tensors[r["recomputed_as"]].consumers)
        assert r["tensor"] not in {i for n in readers for i in n.input}


def test_clones_are_placed_and_gated_before_the_reader(small_artifacts: Path) -> None:
    model = onnx.load(str(small_artifacts / "training_model.onnx"))
    result = RecomputePass().run(model)
    nodes = list(result.model.graph.node)
    pos = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    for r in result.records:
        reader = next(k for k, n in enumerate(nodes) if n.name == r["consumer"])
        assert pos[r["recomputed_as"]] < reader
    # Every clone reading only kept tensors reads one of them through a dY-dependent Reshape.
    clones = [n for n in nodes if n.name.endswith("__recompute")]
    assert clones
    producer = {o: n for n in nodes for o in n.output if o}
    for n in clones:
        feeds = [producer.get(i) for i in n.input if i]
        assert any(f is not None and (f.name.endswith("__recompute") or f.op_type == "Reshape") for f in feeds)
    gates = [n for n in nodes if n.op_type == "Reshape" and "__recompute_gated" in n.output[0]]
    for g in gates:
        shape = producer[g.input[1]]
        assert shape.op_type == "Add"
        cast = producer[shape.input[1]]
        assert cast.op_type == "Cast" and producer[cast.input[0]].op_type == "Less"


def test_max_depth_limits_the_chain(small_artifacts: Path) -> None:
    model = onnx.load(str(small_artifacts / "training_model.onnx"))
    deep = RecomputePass().run(model)
    shallow = RecomputePass(max_depth=1).run(model)
    assert all(len(r["cloned_ops"]) <= 1 for r in shallow.records)
    assert any(len(r["cloned_ops"]) >= 3 for r in deep.records)
    assert {r["tensor"] for r in shallow.records} < {r["tensor"] for r in deep.records}
    assert any("max_depth=1" in s.reason for s in shallow.skipped)


def test_explicit_tensors(small_artifacts: Path) -> None:
    model = onnx.load(str(small_artifacts / "training_model.onnx"))
    name = "/features/features.5/BatchNormalization_output_0"
    result = RecomputePass(tensors=[name]).run(model)
    assert [r["tensor"] for r in result.records] == [name]
    assert result.records[0]["cloned_ops"] == ["BatchNormInternal"]
    assert result.records[0]["inputs_kept"] == ["/features/features.4/Conv_output_0"]
    conv = RecomputePass(tensors=["/features/features.4/Conv_output_0"]).run(model)
    assert not conv.records and "Conv" in conv.skipped[0].reason
    with pytest.raises(OnnxcompError, match="not stashed tensors"):
        RecomputePass(tensors=["no_such_tensor"]).run(model)
    with pytest.raises(OnnxcompError, match="iterable"):
        RecomputePass(tensors=name)  # type: ignore[arg-type]


def test_bad_options() -> None:
    with pytest.raises(OnnxcompError, match="never"):
        RecomputePass(ops=["Relu", "Dropout"])
    with pytest.raises(OnnxcompError, match="max_depth"):
        RecomputePass(max_depth=0)


def test_residual_graph_selection(residual_artifacts: Path) -> None:
    model = onnx.load(str(residual_artifacts / "training_model.onnx"))
    result = RecomputePass().run(model)
    ops = {op for r in result.records for op in r["cloned_ops"]}
    assert {"BatchNormInternal", "Relu", "Add"} <= ops
    assert not ops & {"Dropout", "Conv", "Gemm"}
    # Nothing downstream of the Dropout can be rebuilt: its mask is random.
    analysis = analyze_model(model)
    dropout_out = {o for n in model.graph.node if n.op_type == "Dropout" for o in n.output}
    assert dropout_out
    recomputed = {r["tensor"] for r in result.records}
    assert not recomputed & dropout_out
    for s in result.skipped:
        if s.name in dropout_out:
            assert "random" in s.reason
    # Every recompute reads only tensors that outlive its reader anyway.
    for r in result.records:
        reader = next(k for k, n in enumerate(model.graph.node) if n.name == r["consumer"])
        for kept in r["inputs_kept"]:
            assert max(analysis.tensors[kept].consumers) >= reader
            assert kept not in recomputed


# -- runtime: bit-identical training, execution order, memory -----------------------------------------
@pytest.mark.parametrize("order", ORDERS)
def test_small_cnn_bit_identical(small_artifacts: Path, tmp_path: Path, order: str) -> None:
    model = onnx.load(str(small_artifacts / "training_model.onnx"))
    name = _write(tmp_path, RecomputePass().run(model).model, "recompute_test.onnx")
    _assert_bit_identical(small_artifacts, name, order)


@pytest.mark.parametrize("order", ORDERS)
def test_residual_bit_identical(residual_artifacts: Path, tmp_path: Path, order: str) -> None:
    model = onnx.load(str(residual_artifacts / "training_model.onnx"))
    name = _write(tmp_path, RecomputePass().run(model).model, "recompute_test.onnx")
    _assert_bit_identical(residual_artifacts, name, order)


@pytest.mark.parametrize("order", ORDERS)
def test_clones_run_in_backward_just_in_time(residual_artifacts: Path, tmp_path: Path, order: str) -> None:
    model = onnx.load(str(residual_artifacts / "training_model.onnx"))
    result = RecomputePass().run(model)
    name = _write(tmp_path, result.model, "recompute_order.onnx")
    ran = _execution_order(residual_artifacts, name, order, tmp_path)
    at = {n: k for k, n in enumerate(ran)}
    nodes = list(result.model.graph.node)
    producer = {o: n for n in nodes for o in n.output if o}
    after = analyze_model(result.model)
    # The loss gradient op is the first backward node of the untouched graph.
    first_backward = at[next(n.name for n in nodes if n.op_type == "SoftmaxCrossEntropyLossGrad")]
    checked = 0
    for r in result.records:
        clone = producer[r["recomputed_as"]]
        reader = r["consumer"]
        assert first_backward < at[clone.name] < at[reader]
        if not r["cloned_ops"]:
            continue   # reuses a clone made (and checked) for an earlier reader
        # The gradient the reader consumes exists before the clone runs.
        reader_node = next(n for n in nodes if n.name == reader)
        grads = [producer[i].name for i in reader_node.input
                 if i in producer and after.boundary.is_backward(nodes.index(producer[i]))
                 and i != r["recomputed_as"]]
        assert grads and all(at[g] < at[clone.name] for g in grads)
        checked += 1
    assert checked
    # ORT neither folded nor dropped the gates: every inserted node ran, and each dY-derived zero
    # (Cast(Less(t, t))) was computed after the gradient it reads.
    inserted = [n for n in nodes if "recompute" in n.name]
    assert all(n.name in at for n in inserted), [n.name for n in inserted if n.name not in at]
    less = [n for n in inserted if n.op_type == "Less"]
    assert less
    for n in less:
        flat = producer[producer[n.input[0]].input[0]]          # Slice <- Reshape(dY, [-1])
        assert flat.op_type == "Reshape"
        assert at[producer[flat.input[0]].name] < at[flat.name] < at[n.name]


def test_measured_peak_drops(tmp_path: Path) -> None:
    from onnxcomp.runtime.measure import measure

    # Big enough for the predicted saving (2.5 MiB) to stand well above allocator noise (~0.1 MiB between
    # runs of one graph), small enough to be quick.
    art = _build_residual_artifacts(tmp_path / "res", batch=32, image=32, width=16, dropout=False)
    model = onnx.load(str(art / "training_model.onnx"))
    from onnxcomp.planner import plan_all

    result = RecomputePass().run(model)
    planned = [plan_all(analyze_model(m).buffers()).to_dict()["lower_bound_bytes"] for m in (model, result.model)]
    assert planned[1] < planned[0]
    name = _write(art, result.model, "recompute.onnx")
    base = measure(art, steps=2)
    new = measure(art, model=name, steps=2)
    assert base.losses == new.losses
    # The measured peak drops by a real share of the predicted saving and stays near the prediction: 66-77 %
    # of it was realised in 6 runs here (batch 16 and 32). Before the forward MaxPool's unread indices were
    # left out it was 23-45 % (ORT held them to the step's end), so a 1/4 floor also guards that fix.
    drop = planned[0] - planned[1]
    assert new.peak_bytes < base.peak_bytes - drop // 4, (base.peak_bytes, new.peak_bytes, planned)
    assert new.peak_bytes < 1.25 * planned[1], (new.peak_bytes, planned)


def test_after_lossless_respects_encodings(residual_artifacts: Path) -> None:
    from onnxcomp.transform import transform_model

    model = onnx.load(str(residual_artifacts / "training_model.onnx"))
    lossless = transform_model(model, "lossless-encode", min_bytes=0).model
    result = RecomputePass().run(lossless)
    analysis = analyze_model(lossless)
    payloads = {s.name for s in analysis.stashed
                if any(lossless.graph.node[c].op_type.startswith("OnnxcompDecode_") for c in s.backward_consumers)}
    assert payloads
    assert not payloads & {r["tensor"] for r in result.records}
    reasons = {s.name: s.reason for s in result.skipped}
    assert all("payload" in reasons[p] for p in payloads)
    # Encoders and decoders are all still there.
    ops = [n.op_type for n in result.model.graph.node]
    assert ops.count("OnnxcompEncode_sparse") == [n.op_type for n in lossless.graph.node].count("OnnxcompEncode_sparse")


@pytest.mark.parametrize("order", ORDERS)
def test_replace_encoded_after_lossless(residual_artifacts: Path, tmp_path: Path, order: str) -> None:
    from onnxcomp.transform import transform_model

    model = onnx.load(str(residual_artifacts / "training_model.onnx"))
    lossless = transform_model(model, "lossless-encode", min_bytes=0).model
    result = RecomputePass(replace_encoded=True).run(lossless)
    replaced = [r for r in result.records if r.get("replaced_encoding")]
    # MaxPool's indices are held natively (standard ops; passes/maxpool_index.py), which replace_encoded leaves
    # alone as it does the native sign bits: only the sparse PyOp encodings are replaced.
    assert {r["replaced_encoding"] for r in replaced} == {"sparse"}
    before_ops = [n.op_type for n in lossless.graph.node]
    after_ops = [n.op_type for n in result.model.graph.node]
    assert "OnnxcompEncode_maxpool_index" not in before_ops and "Mod" in before_ops
    for codec in ("sparse",):
        n = sum(r["replaced_encoding"] == codec for r in replaced)
        assert after_ops.count(f"OnnxcompEncode_{codec}") == before_ops.count(f"OnnxcompEncode_{codec}") - n
        assert after_ops.count(f"OnnxcompDecode_{codec}") == before_ops.count(f"OnnxcompDecode_{codec}") - n
    # sign bits decode to signs / a mask, not values: never replaced. (The mask form packs Greater(y, 0)
    # natively by default: MatMulInteger, and a Gather from the bits table decodes it; encode_stash.py.)
    for op in ("MatMulInteger", "Gather", "Mod"):
        assert after_ops.count(op) == before_ops.count(op) > 0
    after = analyze_model(result.model)
    before = analyze_model(lossless)
    assert sum(s.nbytes for s in after.stashed) < sum(s.nbytes for s in before.stashed)
    name = _write(tmp_path, result.model, "lossless_recompute.onnx")
    _assert_bit_identical(residual_artifacts, name, order)
