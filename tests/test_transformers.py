"""Transformer training graphs: the export traps, ORT-rule validation, the text corpus, the zoo transformers."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

from onnxcomp.errors import OnnxcompError
from onnxcomp.models.transformer_export import repair_model_for_training
from onnxcomp.passes.base import check_model
from onnxcomp.runtime.text_data import VOCAB_SIZE, decode_tokens, encode_text, text_dataset
from onnxcomp.transform import transform_model
from onnxcomp.validate import validate_rewritten


class _UserEncoder(nn.Module):
    """What a user writes: torch's own pre-norm encoder layer (GELU, dropout), i.e. SDPA attention."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 32)
        self.enc = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.1, activation="gelu", batch_first=True,
                                              norm_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.embed(x)).mean(1))


def _artifacts(tmp_path, opset: int, repair: bool):
    from onnxruntime.training import artifacts

    torch.manual_seed(0)
    model = _UserEncoder()
    d = tmp_path / f"o{opset}{'r' if repair else ''}"
    d.mkdir()
    torch.onnx.export(model, (torch.randn(4, 6, 8),), str(d / "f.onnx"), dynamo=False,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=opset,
                      input_names=["input"], output_names=["logits"])
    forward = onnx.load(str(d / "f.onnx"))
    fixed = repair_model_for_training(forward) if repair else None
    onnx.save(forward, str(d / "f.onnx"))
    artifacts.generate_artifacts(str(d / "f.onnx"), requires_grad=[n for n, _ in model.named_parameters()],
                                 frozen_params=[], loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(d))
    return onnx.load(str(d / "training_model.onnx")), fixed


def test_export_repair_makes_user_encoder_differentiable(tmp_path):
    # The trap, reproduced: opset 17 LayerNormalization with one output, SDPA's Dropout without a mask.
    with pytest.raises(Exception, match="OutputDefs"):
        _artifacts(tmp_path, 17, repair=False)
    graph, fixed = _artifacts(tmp_path, 17, repair=True)
    assert fixed == {"LayerNormalization": 2, "Dropout": 1}
    ops = {n.op_type for n in graph.graph.node}
    assert {"LayerNormalizationGrad", "DropoutGrad"} <= ops
    validate_rewritten(graph, "opset-17 graph")


def test_opset16_graph_with_ort_layernorm_is_accepted(tmp_path):
    # Opset 16: LayerNorm is decomposed at export and ORT fuses it back into an ONNX-domain
    # LayerNormalization that ONNX defines only from opset 17; ORT runs it, so transform must accept it.
    graph, _ = _artifacts(tmp_path, 16, repair=True)
    assert any(n.op_type == "LayerNormalization" and n.domain in ("", "ai.onnx") for n in graph.graph.node)
    assert next(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")) == 16
    with pytest.raises(onnx.checker.ValidationError, match="LayerNormalization"):
        onnx.checker.check_model(graph, full_check=True)
    validate_rewritten(graph, "opset-16 graph")
    check_model(graph, "opset-16 graph")   # the passes' own check tolerates it too
    for policy in ("lossless", "dpr-fp16", "comet"):
        transform_model(graph, policy)


def _tiny_graph() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["y"], name="neg")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 16)],
                             ir_version=8)


def test_validate_fails_on_what_onnxcomp_got_wrong():
    good = _tiny_graph()
    validate_rewritten(good, "good")
    miswired = _tiny_graph()
    miswired.graph.node[1].input[0] = "nowhere"
    with pytest.raises(OnnxcompError, match="mis-wired.*nowhere"):
        validate_rewritten(miswired, "bad", original=good)
    unknown = _tiny_graph()
    unknown.graph.node[1].op_type = "NoSuchOp"
    with pytest.raises(OnnxcompError, match="NoSuchOp"):
        validate_rewritten(unknown, "bad", original=good)
    # A complaint the input graph shares is not onnxcomp's doing.
    validate_rewritten(unknown, "bad", original=unknown)


def test_text_corpus_round_trip_and_batches():
    text = "def f(x):\n\treturn x + 1  # é"
    ids = encode_text(text)
    assert ids.max() < VOCAB_SIZE
    assert decode_tokens(ids) == text.replace("\t", " ").replace("é", " ")
    data = text_dataset((3, 16), VOCAB_SIZE, max_bytes=200_000)
    x, y = next(data.train_batches(0))
    assert x.shape == (3, 16) and y.shape == (48,) and x.dtype == y.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y.reshape(3, 16)[:, :-1])  # labels are the next characters
    val = list(data.test_batches(2))
    assert len(val) == 2 and not np.array_equal(val[0][0], val[1][0])
    with pytest.raises(OnnxcompError, match="vocabulary"):
        text_dataset((3, 16), 10)


@pytest.mark.slow
@pytest.mark.parametrize("name,kwargs,data", [("vit_tiny", {"image": 16}, "digits"),
                                              ("gpt_tiny", {"seq_len": 32}, "text")])
def test_zoo_transformer_lossless_bit_identical(tmp_path, name, kwargs, data):
    from onnxcomp.models.artifacts import generate_artifacts
    from onnxcomp.runtime.measure import measure
    from onnxcomp.transform import transform

    art = tmp_path / name
    generate_artifacts(name, 4, kwargs.get("image", 16), 10 if name == "vit_tiny" else VOCAB_SIZE, art,
                       seq_len=kwargs.get("seq_len"))
    meta = json.loads((art / "onnxcomp.json").read_text())
    assert meta["inputs"]["input"] == ([4, 32] if name == "gpt_tiny" else [4, 3, 16, 16])
    transform(art, art / "lossless.onnx", "lossless")
    base = measure(art, steps=3, data=data)
    rewritten = measure(art, model="lossless.onnx", steps=3, data=data)
    assert base.losses == rewritten.losses


# -- passes on a tiny GPT (one block, T 16): exact policies bit-identical, each technique applied ----------
@pytest.fixture(scope="module")
def tiny_gpt(tmp_path_factory):
    from onnxruntime.training import artifacts

    from onnxcomp.models.export import export_training_onnx
    from onnxcomp.models.transformers import GPTTiny

    d = tmp_path_factory.mktemp("tiny_gpt")
    torch.manual_seed(0)
    model = GPTTiny(VOCAB_SIZE, seq_len=16, dim=32, depth=1, heads=2, dropout=0.1)
    export_training_onnx(model, 2, 1, VOCAB_SIZE, d / "forward.onnx")
    artifacts.generate_artifacts(str(d / "forward.onnx"), requires_grad=[n for n, _ in model.named_parameters()],
                                 frozen_params=[], loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(d))
    (d / "onnxcomp.json").write_text(json.dumps({"classes": VOCAB_SIZE, "labels": "labels"}))
    return d


def _train(d, model: str, steps: int = 3):
    from onnxcomp.runtime.train import train

    r = train(d, model=model, steps=steps, data="synthetic", progress=False, return_parameters=True)
    return r.losses, r.parameters


def test_lossless_transformer_techniques_bit_identical(tiny_gpt):
    from onnxcomp.transform import transform

    result = transform(tiny_gpt, tiny_gpt / "lossless.onnx", "lossless", min_bytes=0)
    done = {(r["pattern"].split("→")[0], r["encoding"]) for r in result.records}
    assert {("Dropout-mask", "bitmask"), ("Dropout-output", "recompute"), ("Softmax-output", "recompute"),
            ("LayerNorm-output", "recompute"), ("Gelu-output", "recompute")} <= done
    assert result.after["stashed_bytes"] < result.before["stashed_bytes"] / 2
    # Typed records of the new rewrite layer; the attention-dropout clone waits on the editor's gate (a
    # Reshape view), not on a hand-built Less/Cast/ReduceSum chain.
    assert {r.kind for r in result.records if r["encoding"] == "recompute"} == {"recomputed"}
    assert any(r.pass_name == "recompute_attention_dropout" for r in result.records)
    assert any(r.pass_name == "chunk_attention" and r["exact"] for r in result.all_records)  # bit-identical below
    original = onnx.load(str(tiny_gpt / "training_model.onnx"))
    count = lambda m, op: sum(n.op_type == op for n in m.graph.node)  # noqa: E731
    assert count(result.model, "ReduceSum") == count(original, "ReduceSum")
    base_losses, base_params = _train(tiny_gpt, "training_model.onnx")
    losses, params = _train(tiny_gpt, "lossless.onnx")
    assert losses == base_losses
    np.testing.assert_array_equal(params, base_params)


def test_early_weight_gradients_move_before_layernorm_grad(tiny_gpt):
    from onnxcomp.passes.early_weight_grad import EarlyWeightGradientPass

    model = onnx.load(str(tiny_gpt / "training_model.onnx"))

    def positions(m):
        names = [n.name for n in m.graph.node]
        gemm = next(i for i, n in enumerate(names) if "norm1" not in n and "qkv/MatMul_Grad/Gemm" in n)
        lngrad = next(i for i, n in enumerate(m.graph.node) if n.op_type == "LayerNormalizationGrad"
                      and "norm1" in n.name and "blocks.0" in n.name)
        return gemm, lngrad

    gemm, lngrad = positions(model)
    assert gemm > lngrad   # ORT's order: every weight gradient at the end
    result = EarlyWeightGradientPass().run(model)
    moved = result.model
    gemm, lngrad = positions(moved)
    assert gemm < lngrad and result.modified and {r.kind for r in result.records} == {"moved"}
    validate_rewritten(moved, "early", original=model)


def test_bitmask_codec_round_trip_and_size():
    from onnxcomp.custom_ops import get_codec

    codec = get_codec("bitmask")
    mask = np.random.default_rng(0).random((2, 4, 16, 16)) < 0.9
    bits, shape = codec.encode_cpu(mask)
    assert bits.nbytes == mask.size // 8 and tuple(shape) == mask.shape
    decoded = codec.decode_cpu((bits, shape))
    assert decoded.dtype == np.bool_
    np.testing.assert_array_equal(decoded, mask)


def test_zoo_transformers_build_with_their_input_size():
    from onnxcomp.models import build_model

    vit = build_model("vit_tiny", 10, image=16)
    assert vit(torch.randn(2, 3, 16, 16)).shape == (2, 10)
    with pytest.raises(OnnxcompError, match="16×16"):
        vit.check_image_size(32, 32)
    gpt = build_model("gpt_tiny", VOCAB_SIZE, seq_len=12, image=99)   # image reaches only image models
    tokens = gpt.example_input(3)
    assert tokens.shape == (3, 12) and gpt(tokens).shape == (36, VOCAB_SIZE)


# -- lossy policies on transformers: stashes behind recompute gates, the error-bounded MatMul inputs --------
def test_dpr_takes_stashes_a_recompute_gate_reads_first(tiny_gpt):
    """GELU / LayerNorm inputs are first read in backward by a recompute clone's gate, whose only backward
    input is an int64 shape; the decoder waits on the gradient that gate waits on."""
    from onnxcomp.analysis import analysis_of
    from onnxcomp.passes.encode_stash import decoder_trigger
    from onnxcomp.transform import transform

    transform(tiny_gpt, tiny_gpt / "recompute.onnx", "recompute", min_bytes=0)
    analysis = analysis_of(onnx.load(str(tiny_gpt / "recompute.onnx")))
    gated = [s for s in analysis.stashed if s.pattern.split("→")[0] == "Add-output" and s.dtype == "float32"
             and analysis.incoming_gradient(min(s.backward_consumers), s.name) is None]
    assert gated, "the recompute policy should leave GELU / LayerNorm inputs read first by a gate"
    for stash in gated:
        first = min(stash.backward_consumers)
        trigger = decoder_trigger(analysis, first, stash.name)
        assert trigger is not None and analysis.is_gradient(trigger)
        assert analysis.tensors[trigger].producer < first    # exists before the gate, made in backward

    result = transform(tiny_gpt, tiny_gpt / "dpr-fp16.onnx", "dpr-fp16", min_bytes=0)
    taken = {r["pattern"].split("→")[1].split("/")[0] for r in result.records
             if r["encoding"] == "dpr" and r["pattern"].startswith("Add-output")}
    assert "LayerNormalizationGrad" in taken
    # The GELU input is no stash any more: LinearRecomputePass rebuilds it from the LayerNorm input (or DPR
    # holds it); no float32 copy of it may stay alive into backward.
    gelu_input = [s for s in analysis_of(onnx.load(str(tiny_gpt / "training_model.onnx"))).stashed
                  if s.dtype == "float32" and s.pattern.startswith("Add-output→GeluGrad")]
    assert gelu_input                     # the untouched graph stashes it
    lossy = analysis_of(onnx.load(str(tiny_gpt / "dpr-fp16.onnx")))
    assert "GeluGrad" in taken or not [s for s in lossy.stashed if s.dtype == "float32"
                                       and s.pattern.startswith("Add-output→GeluGrad")]
    assert not [s for s in result.skipped if s["reason"].startswith("its first backward reader has no")
                and s["pattern"].startswith("Add-output")]


@pytest.mark.slow
def test_dpr_fp16_trains_close_to_baseline_with_validation_loss(tiny_gpt):
    from onnxcomp.runtime.train import train
    from onnxcomp.transform import transform

    if not (tiny_gpt / "dpr-fp16.onnx").exists():
        transform(tiny_gpt, tiny_gpt / "dpr-fp16.onnx", "dpr-fp16", min_bytes=0)
    runs = [train(tiny_gpt, model=m, steps=3, data="text", eval_every=3, progress=False)
            for m in ("training_model.onnx", "dpr-fp16.onnx")]
    (base_step, base_val), = runs[0].val_loss_history
    (step, val), = runs[1].val_loss_history
    assert step == base_step == 3 and np.isfinite(val) and 0 < val < 2 * np.log(VOCAB_SIZE)
    np.testing.assert_allclose(runs[1].losses, runs[0].losses, rtol=1e-2)
    assert runs[1].losses != runs[0].losses    # fp16 stashes: lossy, not a no-op
    np.testing.assert_allclose(val, base_val, rtol=1e-2)


def test_error_bounded_pass_takes_matmul_inputs_with_their_sum_length(tiny_gpt):
    from onnxcomp.runtime.controller import AdaptiveBoundController, bounded_layers
    from onnxcomp.transform import transform

    result = transform(tiny_gpt, tiny_gpt / "comet.onnx", "comet", min_bytes=0)
    sz = [r for r in result.records if r["codec"] == "sz"]
    proj = [r for r in sz if "attn/proj" in r["tensor"]]
    assert proj, "the attention output projection's input is a MatMul input read only for dW"
    graph_inputs = {i.name for i in result.model.graph.input}
    for r in sz:
        shape = r["shape"]
        assert r["params"]["weight"] in graph_inputs                       # the parameter behind Transpose
        assert r["params"]["summed"] == int(np.prod(shape)) // shape[-1]   # batch × positions
    layers = {layer.key: layer for layer in bounded_layers(result.model)}
    layer = layers[proj[0]["tensor"]]
    assert layer.summed == proj[0]["params"]["summed"]
    ctl = AdaptiveBoundController(list(layers.values()), a=1.0, sigma_frac=1e-3)
    layer.grad_scale = 2.0
    # eb = σ / (a · rms(dY) · √(N·R)) with N the recorded sum length, not the batch.
    assert ctl.bound_for(layer, 0.25, 0.5, 10**6, (32, 32)) == pytest.approx(
        2e-3 / (0.5 * (layer.summed * 0.25) ** 0.5))


def test_summed_products_counts_rows_of_the_contracted_axis():
    from onnxcomp.passes.error_bounded import summed_products

    assert summed_products((4096, 128), x_first=True) == 4096           # ORT's 2-D view of [B·T, C]
    assert summed_products((16, 256, 128), x_first=True) == 16 * 256
    assert summed_products((16, 128, 256), x_first=False) == 16 * 256   # W·X: K is the second last axis
    assert summed_products((32, 10), x_first=True) == 32                # a classifier's input: the batch


def test_dpr_mixed_holds_recompute_sources_wider(tiny_gpt):
    """dpr-fp8-src16: a stash that recompute clones are rebuilt from (read in backward through a gate with no
    gradient input, e.g. the LayerNorm input that LayerNorm's output and Q/K/V are rebuilt from) is held in
    fp16; every other float stash dpr-fp8 takes stays fp8. Same stashes taken as dpr-fp8; the forward pass
    is untouched (first loss identical) and the first steps move the parameters less far from the exact
    graph's than all-fp8 does."""
    from onnxcomp.analysis import analysis_of
    from onnxcomp.passes.dpr import feeds_recompute
    from onnxcomp.transform import transform

    transform(tiny_gpt, tiny_gpt / "mixed-recompute.onnx", "recompute", min_bytes=0)
    analysis = analysis_of(onnx.load(str(tiny_gpt / "mixed-recompute.onnx")))
    floats = [s for s in analysis.stashed if s.dtype == "float32"]
    sources = {s.name for s in floats if feeds_recompute(analysis, s)}
    assert sources and sources != {s.name for s in floats}
    # The sources are the LayerNorm inputs (a gate, i.e. a Reshape view, reads them), not the loss's log-probs
    # (their gradient op reads the constant dLoss, no gradient either, but no gate) nor the projection inputs.
    assert all("Reshape" in s.backward_consumer_ops for s in floats if s.name in sources)
    assert all(s.pattern.startswith(("Add-output", "Dropout-output")) for s in floats if s.name in sources)

    fp8 = transform(tiny_gpt, tiny_gpt / "mixed-dpr-fp8.onnx", "dpr-fp8", min_bytes=0)
    mixed = transform(tiny_gpt, tiny_gpt / "mixed-dpr-fp8-src16.onnx", "dpr-fp8-src16", min_bytes=0)
    codec = {r["tensor"]: r["codec"] for r in mixed.records if r["encoding"] == "dpr"}
    assert set(codec) == {r["tensor"] for r in fp8.records if r["encoding"] == "dpr"}
    wide = {t for t, c in codec.items() if c == "dpr_fp16"}
    assert wide and set(codec) - wide and all(codec[t] == "dpr_fp8" for t in set(codec) - wide)
    # The wide ones are read by LayerNormalizationGrad and a recompute gate (a Reshape view) in backward.
    assert all({"LayerNormalizationGrad", "Reshape"} <= set(r["pattern"].split("→")[1].split("/"))
               for r in mixed.records if r["tensor"] in wide)
    assert mixed.after["stashed_bytes"] + mixed.after["offset_bytes"] > fp8.after["stashed_bytes"] + fp8.after["offset_bytes"]
    fp10 = transform(tiny_gpt, tiny_gpt / "mixed-dpr-fp8-src10.onnx", "dpr-fp8-src10", min_bytes=0)
    assert {r["tensor"]: r["codec"] for r in fp10.records if r["encoding"] == "dpr"} == \
        {t: "dpr_fp10" if t in wide else c for t, c in codec.items()}

    base_losses, base_params = _train(tiny_gpt, "training_model.onnx", steps=2)
    fp8_losses, fp8_params = _train(tiny_gpt, "mixed-dpr-fp8.onnx", steps=2)
    losses, params = _train(tiny_gpt, "mixed-dpr-fp8-src16.onnx", steps=2)
    assert losses[0] == base_losses[0] == fp8_losses[0]     # DPR holds backward copies only
    np.testing.assert_allclose(losses, base_losses, rtol=2e-2)
    assert 0 < np.linalg.norm(params - base_params) < np.linalg.norm(fp8_params - base_params)


def test_segment_reuse_plan_on_a_lossy_transformer(tiny_gpt, monkeypatch):
    """The reuse pass's segment plan on a whole lossy transform (tiny GPT, every buffer considered): the plan
    with the lower replayed ORT reuse peak is the one applied, and the segment plan's views change no loss
    or parameter against the same transform without it (both may break the same MatMul fusions)."""
    import functools

    import onnxcomp.transform as tr
    from onnxcomp.analysis import analyze_model
    from onnxcomp.analysis.execution_order import in_run_order
    from onnxcomp.passes.reuse_signature import ReuseSignaturePass
    from onnxcomp.planner.ort_reuse import ort_signatures, planned_live, reuse_plan

    def replayed(path):
        m = in_run_order(onnx.load(str(path)), "default")
        a = analyze_model(m)
        return int(planned_live(reuse_plan(a.buffers(), len(m.graph.node), ort_signatures(a)),
                                len(m.graph.node)).max())

    monkeypatch.setattr(tr, "ReuseSignaturePass", functools.partial(ReuseSignaturePass, min_bytes=0, segments=0))
    greedy = tr.transform(tiny_gpt, tiny_gpt / "seg-off.onnx", "dpr-fp8", min_bytes=0)
    monkeypatch.setattr(tr, "ReuseSignaturePass", functools.partial(ReuseSignaturePass, min_bytes=0, segments=6))
    seg = tr.transform(tiny_gpt, tiny_gpt / "seg-on.onnx", "dpr-fp8", min_bytes=0)
    modes = {r["plan"] for r in seg.all_records if r.pass_name == "reuse_signature"}
    assert len(modes) == 1
    assert all(r["plan"] == "greedy" for r in greedy.all_records if r.pass_name == "reuse_signature")
    if modes == {"segments"}:
        assert replayed(tiny_gpt / "seg-on.onnx") < replayed(tiny_gpt / "seg-off.onnx")
        ranks = [len(v.type.tensor_type.shape.dim) for v in onnx.load(str(tiny_gpt / "seg-on.onnx")).graph.value_info]
        assert max(ranks) > 4                       # the later stretches' leading axes
    else:
        assert replayed(tiny_gpt / "seg-on.onnx") == replayed(tiny_gpt / "seg-off.onnx")
    off_losses, off_params = _train(tiny_gpt, "seg-off.onnx", steps=2)
    on_losses, on_params = _train(tiny_gpt, "seg-on.onnx", steps=2)
    assert on_losses[0] == off_losses[0]
    np.testing.assert_allclose(on_losses, off_losses, rtol=1e-6)
    np.testing.assert_allclose(on_params, off_params, rtol=1e-5, atol=1e-7)
