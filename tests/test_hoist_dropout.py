"""Dropout draws hoisted to the step's start (passes/hoist_dropout.py): on a two-block GPT through `lossless`,
every draw moves ahead of the forward pass, in its order, under both ORT execution orders, and training is
bit-identical to the untouched graph; the pass refuses graphs where the draw order is not fixed."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.parser
import pytest

pytest.importorskip("onnxruntime.training")
torch = pytest.importorskip("torch")

from onnxcomp.passes import HoistDropoutDrawsPass  # noqa: E402
from onnxcomp.runtime.text_data import VOCAB_SIZE  # noqa: E402


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A two-block GPT (T 16, dim 32, 2 heads, dropout 0.1) through `lossless` (attention chunked, masks as
    bits): seven Dropouts, two of them attention draws from zeros."""
    from onnxruntime.training import artifacts

    from onnxcomp.models.export import export_training_onnx
    from onnxcomp.models.transformers import GPTTiny
    from onnxcomp.transform import transform

    d = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    model = GPTTiny(VOCAB_SIZE, seq_len=16, dim=32, depth=2, heads=2, dropout=0.1)
    export_training_onnx(model, 2, 1, VOCAB_SIZE, d / "forward.onnx")
    artifacts.generate_artifacts(str(d / "forward.onnx"), requires_grad=[n for n, _ in model.named_parameters()],
                                 frozen_params=[], loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(d))
    (d / "onnxcomp.json").write_text(json.dumps({"classes": VOCAB_SIZE, "labels": "labels"}))
    transform(d, d / "lossless.onnx", "lossless", min_bytes=0)
    return d


def _train(d, model: str, steps: int = 3):
    from onnxcomp.runtime.train import train

    r = train(d, model=model, steps=steps, data="synthetic", progress=False, return_parameters=True)
    return r.losses, r.parameters


def _hoisted(d):
    lossless = onnx.load(str(d / "lossless.onnx"))
    assert not HoistDropoutDrawsPass().run(lossless).records     # T 16: every draw far below 8 MiB
    return HoistDropoutDrawsPass(draw_bytes=0).run(lossless)


def _forward_start(model: onnx.ModelProto, order: list[int]) -> int:
    """Position (in ``order``) of the first node that reads the gated token input: the forward's start."""
    gated = next(n.output[0] for n in model.graph.node if n.output[0].startswith("onnxcomp_hoist_input_after_draws"))
    return min(k for k, i in enumerate(order) if gated in model.graph.node[i].input)


def test_draws_run_first_in_order_and_training_is_bit_identical(gpt2):
    from onnxcomp.analysis.execution_order import ort_order
    from onnxcomp.validate import validate_rewritten

    original = onnx.load(str(gpt2 / "lossless.onnx"))
    result = _hoisted(gpt2)
    model = result.model
    validate_rewritten(model, "hoist", original=original)
    before = [n.name for n in original.graph.node if n.op_type == "Dropout"]
    assert [r["node"] for r in result.records] == before and len(before) == 7
    assert sum(r["applied"] == "chunks read the decoded mask" for r in result.records) == 2
    # The chain starts from the token input, not a parameter (whose first reader may run late under DEFAULT,
    # keeping the last draw's output alive until then).
    gated_view = next(n for n in model.graph.node if n.output[0].startswith("onnxcomp_hoist_input_after_draws"))
    assert gated_view.input[0] == "input"
    producer = {o: n for n in model.graph.node for o in n.output}
    for order in ("priority", "default"):
        run = ort_order(model, order)
        drops = [k for k, i in enumerate(run) if model.graph.node[i].op_type == "Dropout"]
        assert [model.graph.node[run[k]].name for k in drops] == before       # the same draws, same order
        assert max(drops) < _forward_start(model, run), order                  # all before the forward
    for n in model.graph.node:
        if n.op_type == "Dropout":
            assert producer[n.input[0]].op_type == "ConstantOfShape"
    again = HoistDropoutDrawsPass(draw_bytes=0).run(model)
    assert not again.records and any("hoisted already" in s.reason for s in again.skipped)
    onnx.save(model, str(gpt2 / "hoisted.onnx"))
    base_losses, base_params = _train(gpt2, "training_model.onnx")
    losses, params = _train(gpt2, "hoisted.onnx")
    assert losses == base_losses
    np.testing.assert_array_equal(params, base_params)

    # Control: the forward reading the first two residual masks the other way round trains differently (the
    # comparison above sees which draw goes where).
    decoders = [n for n in model.graph.node if "__forward_decode" in n.name and "drop1" in n.name][:1] + \
               [n for n in model.graph.node if "__forward_decode" in n.name and "mlp" in n.name][:1]
    a, b = decoders
    a_in, b_in = list(a.input), list(b.input)
    a.input[0], a.input[1], b.input[0], b.input[1] = b_in[0], b_in[1], a_in[0], a_in[1]
    onnx.save(model, str(gpt2 / "swapped.onnx"))
    swapped, _ = _train(gpt2, "swapped.onnx", steps=1)
    assert swapped != base_losses[:1]


def test_independent_dropouts_are_not_a_chain():
    # Two Dropouts on independent branches: ORT's two orders may draw them either way round, so the pass
    # stops at the first Dropout that does not depend on the one before.
    parallel = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4,8] x) => (float[4,8] y) {
        r = Constant <value = float {0.5}> ()
        on = Constant <value = bool {1}> ()
        a, ma = Dropout (x, r, on)
        b, mb = Dropout (x, r, on)
        y = Add (a, b)
    }""")
    import onnx_ir as ir

    from onnxcomp.passes.hoist_dropout import _depends_on

    g = ir.serde.deserialize_model(parallel).graph
    a, b = [n for n in g if n.op_type == "Dropout"]
    assert not _depends_on(b, a) and not _depends_on(a, b)


def test_refused_without_bit_masks_or_with_a_second_random_op(gpt2):
    from onnxcomp.transform import transform

    transform(gpt2, gpt2 / "recompute.onnx", "recompute", min_bytes=0, force=True)   # masks stay bool
    result = HoistDropoutDrawsPass(draw_bytes=0).run(onnx.load(str(gpt2 / "recompute.onnx")))
    assert not result.records and any("not held as bits" in s.reason for s in result.skipped)

    lossless = onnx.load(str(gpt2 / "lossless.onnx"))
    x = next(i for i in lossless.graph.input)
    lossless.graph.node.append(onnx.helper.make_node("RandomUniformLike", [x.name], ["noise"], dtype=1))
    result = HoistDropoutDrawsPass(draw_bytes=0).run(lossless)
    assert not result.records and any("other random ops" in s.reason for s in result.skipped)


@pytest.mark.slow
def test_zoo_gpt_at_t512_lossless_hoists_and_trains_bit_identically(tmp_path):
    # Batch 1, T 512, 4 heads: each attention draw is 9 B × 1 M scores = 9.4 MiB, over the policy's 8 MiB.
    from onnxcomp.models.artifacts import generate_artifacts
    from onnxcomp.transform import transform

    art = tmp_path / "gpt"
    generate_artifacts("gpt_tiny", 1, 1, VOCAB_SIZE, art, seq_len=512, smoke_test=False)
    result = transform(art, art / "lossless.onnx", "lossless")
    hoisted = [r for r in result.all_records if r.pass_name == "hoist_dropout"]
    assert sum(r["applied"] == "chunks read the decoded mask" for r in hoisted) == 4
    base_losses, base_params = _train(art, "training_model.onnx")
    losses, params = _train(art, "lossless.onnx")
    assert losses == base_losses
    np.testing.assert_array_equal(params, base_params)
