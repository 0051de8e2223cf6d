"""ORTModule on the pinned torch: aliases, the extension build's source fixes, wrap()'s checks, onnxcomp's passes
on a gradient graph ORTModule built (tests/data/ortmodule_small_cnn_gradient.onnx), and — where the C++
extensions are built (`python -m onnxcomp.ortmodule --build`) — training steps through wrap()."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from onnxcomp import ortmodule
from onnxcomp.errors import OnnxcompError

DATA = Path(__file__).parent / "data"
GRADIENT_GRAPH = DATA / "ortmodule_small_cnn_gradient.onnx"   # see make_gradient_graph() below

needs_extensions = pytest.mark.skipif(
    bool(ortmodule.missing_extensions()),
    reason=f"ORTModule's C++ extensions {ortmodule.missing_extensions()} are not built for this torch; "
           "`python -m onnxcomp.ortmodule --build` builds them (~10 min on 2 cores, too long for CI)")


def test_unknown_policy_and_foreign_options_are_refused_before_any_export() -> None:
    with pytest.raises(OnnxcompError, match="unknown policy 'gzip'"):
        ortmodule.wrap(object(), policy="gzip")
    with pytest.raises(OnnxcompError, match="eb"):
        ortmodule.wrap(object(), policy="lossless", eb=1e-3)
    with pytest.raises(OnnxcompError, match="takes no onnxcomp options"):
        ortmodule.wrap(object(), policy="none", min_bytes=0)


def test_missing_extensions_give_the_build_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ortmodule, "_ort_extension_dir", lambda: str(tmp_path))
    assert ortmodule.missing_extensions() == list(ortmodule._EXTENSIONS)
    with pytest.raises(OnnxcompError, match=r"python -m onnxcomp.ortmodule --build"):
        ortmodule.wrap(object(), policy="lossless")


def test_source_fixes_apply_to_the_installed_ort_sources(tmp_path: Path) -> None:
    """The build copies ORT's sources and patches them for torch's intrusive_ptr autograd nodes; every patch
    must still match the sources ORT ships (a patch that no longer applies is an error, not a silent skip)."""
    patches = ortmodule._source_patches()
    assert patches, "torch 2.13's headers hold grad_fn_ as c10::intrusive_ptr: the patches are needed"
    sources = ortmodule._copy_sources("torch_interop_utils", str(tmp_path))
    assert {Path(s).name for s in sources} >= {"ctx_pool.cc", "custom_function_fw.cc", "torch_interop_utils.cc"}
    for file, old, new in patches:
        text = (tmp_path / Path(file).name).read_text()
        assert new in text and (new.startswith(old) or old not in text), file   # an insertion keeps old
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    ortmodule._copy_sources("torch_interop_utils", str(tmp_path))   # unchanged files keep their mtime: no rebuild
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before


SHAPES = {"input": [16, 3, 16, 16]}   # the call the saved graph was built for (ORTModule exports dynamic axes)


def test_policies_on_a_saved_ortmodule_gradient_graph() -> None:
    """The hook's work on a graph ORTModule built: stashes recomputed or encoded, the YieldOp boundary and the
    graph's interface (what ORTModule's TrainingAgent feeds and fetches) unchanged."""
    model = onnx.load(GRADIENT_GRAPH)
    yield_inputs = list(next(n for n in model.graph.node if n.op_type == "YieldOp").input)
    for policy, pyops in (("lossless", False), ("comet", False), ("dpr-fp8", True)):
        result = ortmodule.transform_gradient_graph(model, policy, input_shapes=SHAPES)
        out = result.model
        assert result.records, policy
        assert result.after["stashed_bytes"] < result.before["stashed_bytes"], policy
        assert [i.name for i in out.graph.input] == [i.name for i in model.graph.input]
        assert [o.name for o in out.graph.output] == [o.name for o in model.graph.output]
        yields = [n for n in out.graph.node if n.op_type == "YieldOp"]
        assert len(yields) == 1 and list(yields[0].input) == yield_inputs
        # fp8 DPR runs as onnxcomp PyOps, which wrap() registers in ORTModule's session; comet's encodings on this
        # small graph are all native (fp16 Clip + Cast, sign bits packed by MatMulInteger and unpacked by Gather)
        assert bool(ortmodule._onnxcomp_ops(out)) == pyops, policy
        if policy != "lossless":
            assert {"MatMulInteger", "Gather"} <= {n.op_type for n in out.graph.node}, policy


def test_concrete_inputs_fix_every_dynamic_axis() -> None:
    model = onnx.load(GRADIENT_GRAPH)
    dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert all(dims), "ORTModule exports every input axis as dynamic"
    fixed = ortmodule.concrete_inputs(model, SHAPES)
    assert [d.dim_value for d in fixed.graph.input[0].type.tensor_type.shape.dim] == SHAPES["input"]
    used = {d.dim_param for vi in [*fixed.graph.value_info, *fixed.graph.output] for d in vi.type.tensor_type.shape.dim}
    assert not used & set(dims)
    # ORTModule exports MaxPool as an ATen op (no ONNX schema): its outputs, and everything after, get sizes too
    from onnxcomp.static_batch import unresolved_stashes

    assert any(n.op_type == "ATen" for n in fixed.graph.node) and not unresolved_stashes(fixed)
    assert unresolved_stashes(model)
    with pytest.raises(OnnxcompError, match="rank 4"):
        ortmodule.concrete_inputs(model, {"input": [16, 3, 16]})
    # without the shapes the activations cannot be sized (only what has a static shape, e.g. parameters, is)
    sized = ortmodule.transform_gradient_graph(model, "lossless", input_shapes=SHAPES).before["stashed_bytes"]
    assert ortmodule.transform_gradient_graph(model, "lossless").before["stashed_bytes"] < sized / 100


def test_graph_without_yieldop_is_refused() -> None:
    model = onnx.load(GRADIENT_GRAPH)
    keep = [n for n in model.graph.node if n.op_type != "YieldOp"]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    with pytest.raises(OnnxcompError, match="no YieldOp"):
        ortmodule.transform_gradient_graph(model, "lossless")


@pytest.mark.slow
def test_ortmodule_imports_only_with_the_aliases() -> None:
    code = ("import sys\n"
            "try:\n    from onnxruntime.training.ortmodule import ORTModule\n    print('plain ok')\n"
            "except ImportError as e:\n    print('plain fails:', e)\n"
            "for m in [k for k in sys.modules if k.startswith('onnxruntime.training.ortmodule')]:\n"
            "    del sys.modules[m]\n"
            "from onnxcomp.ortmodule import torch_compat\ntorch_compat()\n"
            "from onnxruntime.training.ortmodule import ORTModule\nprint('with aliases ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "plain fails: cannot import name 'jit_utils'" in proc.stdout and "with aliases ok" in proc.stdout


def _small_cnn():  # noqa: ANN202
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * 4 * 4, 10))


def _train(policy: str, steps: int = 3, save_dir: Path | None = None) -> tuple[list[float], object]:
    import torch

    model = ortmodule.wrap(_small_cnn(), policy=policy, save_dir=save_dir)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(16, 3, 16, 16, generator=gen), torch.randint(0, 10, (16,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, model


def make_gradient_graph(path: Path = GRADIENT_GRAPH) -> None:
    """Regenerate the saved gradient graph (needs the extensions): ORTModule's graph before onnxcomp's passes."""
    _train("lossless", steps=1, save_dir=path.parent / "_ortmodule")
    (path.parent / "_ortmodule" / "ortmodule_gradient.onnx").replace(path)
    for f in (path.parent / "_ortmodule").iterdir():
        f.unlink()
    (path.parent / "_ortmodule").rmdir()


@needs_extensions
@pytest.mark.slow
def test_wrap_trains_like_plain_ortmodule_and_pytorch() -> None:
    import torch

    plain, _ = _train("none")
    lossless, model = _train("lossless")
    report = model.onnxcomp_report
    assert report.builds == 1 and report.transform.records and "recompute" in report.transform.modified_by
    assert lossless == pytest.approx(plain, abs=1e-5)
    comet, model = _train("comet")   # onnxcomp's PyOps inside ORTModule's session
    assert model.onnxcomp_report.custom_ops and comet[0] == pytest.approx(plain[0], abs=1e-5)
    assert comet == pytest.approx(plain, rel=0.05)
    eager = _small_cnn()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 3, 16, 16, generator=gen), torch.randint(0, 10, (16,), generator=gen)
    assert float(torch.nn.functional.cross_entropy(eager(x), y)) == pytest.approx(plain[0], abs=1e-4)


@needs_extensions
@pytest.mark.slow
def test_ortmodule_errors_are_raised_not_hidden_by_fallback() -> None:
    import torch

    model = ortmodule.wrap(_small_cnn(), policy="lossless")
    model(torch.randn(16, 3, 16, 16)).sum().backward()
    with pytest.raises(OnnxcompError, match=r"static for input shapes \[\[16, 3, 16, 16\]\]"):
        model(torch.randn(5, 3, 16, 16))
    bad = ortmodule.wrap(_small_cnn(), policy="none")
    with pytest.raises(Exception, match=r"or 4D \(batched\) input"):   # ORTModule's own errors reach the caller
        bad(torch.randn(3, 16, 16, 16, 16))
