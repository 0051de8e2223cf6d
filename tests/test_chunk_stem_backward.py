"""ChunkedStemBackwardPass: the first layer's ReluGrad → BN grad → ConvGrad in batch chunks, exact up to rounding."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxcomp.analysis.execution_order import ORDERS
from onnxcomp.planner.predict import planned_peak

from onnxcomp.analysis import analyze_model
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import POLICIES, ChunkedStemBackwardPass
from onnxcomp.passes.chunk_stem_backward import PREFIX
from onnxcomp.passes.encode_stash import NATIVE_BITS_LUT
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.train import train

STEM_BN_GRAD = "BatchNormalizationGrad"
STEM_INPUT = "/features/features.0/Conv_output_0"   # the first conv's output, BN's input


def _model(art: Path) -> onnx.ModelProto:
    return onnx.load(str(art / "training_model.onnx"))


def _ops(model: onnx.ModelProto, op: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == op]


def _apply(model: onnx.ModelProto, policy_passes: list) -> onnx.ModelProto:  # noqa: ANN001
    for make in policy_passes:
        model = make().run(model).model
    return model


def test_rewrites_only_the_first_layer(small_artifacts: Path) -> None:
    model = _model(small_artifacts)
    p = ChunkedStemBackwardPass(chunks=2, force=True)
    result = p.run(model)
    out = result.model
    (rec,) = result.records
    assert rec.kind == "chunked" and result.modified
    assert rec["chunks"] == 2 and rec["dropped_stashes"] == [STEM_INPUT] and rec.dropped_stashes == (STEM_INPUT,)
    # The second block's BN grad (its conv needs dX) stays; the first is gone, its ConvGrad split in two.
    assert len(_ops(out, STEM_BN_GRAD)) == len(_ops(model, STEM_BN_GRAD)) - 1
    chunk_convgrads = [n for n in _ops(out, "ConvGrad") if n.name.startswith(PREFIX)]
    assert len(chunk_convgrads) == 2 and all(n.output[0] == "" for n in chunk_convgrads)
    # The BN input is recomputed from the image in every chunk of both passes: no longer stashed.
    assert len([n for n in _ops(out, "Conv") if n.name.startswith(PREFIX)]) == 4
    assert STEM_INPUT in {s.name for s in analyze_model(model).stashed}
    assert STEM_INPUT not in {s.name for s in analyze_model(out).stashed}
    # Idempotent: nothing left to chunk.
    again = ChunkedStemBackwardPass(chunks=2, force=True)
    second = again.run(out)
    assert second.model.graph.node == out.graph.node and not second.records and not second.modified


@pytest.mark.parametrize("chunks", [2, 3])
def test_gradients_match_ort_up_to_rounding(small_artifacts: Path, tmp_path: Path, chunks: int) -> None:
    # 3 chunks of a batch of 4: uneven chunks (1, 2, 1 samples) must weigh the BN sums right.
    path = tmp_path / "chunked.onnx"
    onnx.save(ChunkedStemBackwardPass(chunks=chunks, force=True).run(_model(small_artifacts)).model, str(path))
    base = train(small_artifacts, steps=6, data="synthetic", seed=3, progress=False, return_parameters=True)
    new = train(small_artifacts, model=str(path), steps=6, data="synthetic", seed=3, progress=False,
                return_parameters=True)
    assert len(set(base.losses)) > 1
    assert new.losses[0] == base.losses[0]           # the forward pass is untouched
    np.testing.assert_allclose(new.losses, base.losses, rtol=1e-4)
    # One Adam step moves a parameter by up to lr (1e-3); rounding-level gradient differences move it by
    # ~1e-6 (Adam normalises, so near-zero gradients amplify them): allow 2% of a step.
    one_base, one_new = (train(small_artifacts, model=m, steps=1, data="synthetic", seed=3, progress=False,
                               return_parameters=True).parameters for m in (None, str(path)))
    assert np.abs(one_new - one_base).max() <= 2e-5
    assert not np.array_equal(one_new, one_base)     # really a different computation


def test_wrong_bn_gradient_is_caught(small_artifacts: Path, tmp_path: Path) -> None:
    """The comparison above can fail: a chunked graph that drops the −Σg/N term trains differently."""
    out = ChunkedStemBackwardPass(chunks=2, force=True).run(_model(small_artifacts)).model
    coef_c = next(n for n in out.graph.node if n.op_type == "Neg" and "coef_c" in n.output[0])
    coef_c.op_type = "Sub"
    coef_c.input.append(coef_c.input[0])            # x − x = 0: the mean-gradient term vanishes
    path = tmp_path / "broken.onnx"
    onnx.save(out, str(path))
    base = train(small_artifacts, steps=1, data="synthetic", seed=3, progress=False, return_parameters=True)
    new = train(small_artifacts, model=str(path), steps=1, data="synthetic", seed=3, progress=False,
                return_parameters=True)
    assert np.abs(new.parameters - base.parameters).max() > 2e-5


def _before_chunks(name: str) -> tuple:
    """The policy's steps before its batch-chunked backward regions (the attention chunking follows DPR)."""
    steps = POLICIES[name].steps
    return steps[:next(i for i, s in enumerate(steps) if s.make.__name__ == "ChunkedBackwardPass")]


def test_slices_the_encoded_tensors_not_their_decodes(small_artifacts: Path) -> None:
    """After the sign-bit pass, the ReLU mask reaches ReluGrad as Cast(decoded bool): each chunk slices the
    bool mask and casts its slice; no full-size float mask is materialised."""
    lossy_first = _before_chunks("dpr-fp16")                          # reorder, sign bits, MaxPool indices
    encoded = _apply(_model(small_artifacts), lossy_first)
    out = ChunkedStemBackwardPass(chunks=2, force=True).run(encoded).model
    made_by = {o: n for n in out.graph.node for o in n.output}
    chunk_relu = [n for n in _ops(out, "ReluGrad") if n.name.startswith(PREFIX)]
    assert len(chunk_relu) == 4                                       # 2 chunks x 2 passes
    for n in chunk_relu:
        cast = made_by[n.input[1]]
        assert cast.op_type == "Cast" and made_by[cast.input[0]].op_type == "Slice"
        decode = made_by[made_by[cast.input[0]].input[0]]      # the mask's decode: a native one by default
        assert decode.op_type == "Reshape" and made_by[decode.input[0]].input[0] == NATIVE_BITS_LUT
    n, c, h, w = analyze_model(out).tensors[STEM_INPUT].shape
    full = n * c * h * w * 4
    float_full = [t for t in analyze_model(out).tensors.values()
                  if t.producer is not None and out.graph.node[t.producer].op_type == "Cast" and t.nbytes >= full]
    assert not float_full


@pytest.mark.parametrize("order", ORDERS)
def test_planned_peak_drops_under_both_orders(small_artifacts: Path, order: str) -> None:
    base = _apply(_model(small_artifacts), _before_chunks("dpr-fp16"))
    out = ChunkedStemBackwardPass(chunks=4, force=True).run(base).model
    # The stem's three full-size tensors (4x8x16x16 floats, 32 KiB each) no longer coexist, and the
    # BN input's stash is gone.
    assert planned_peak(out, order) < planned_peak(base, order) - 32 * 1024


def test_planner_chooses_and_reports(small_artifacts: Path) -> None:
    p = ChunkedStemBackwardPass()
    (rec,) = p.run(_apply(_model(small_artifacts), _before_chunks("dpr-fp16"))).records
    assert rec["chunks"] in (2, 4)                     # 8 > batch 4 is not a candidate
    assert rec["region_after"] < rec["region_before"]
    assert rec["predicted_peak_after"] <= rec["predicted_peak_before"]


def test_small_batch_and_bad_options(small_artifacts: Path) -> None:
    p = ChunkedStemBackwardPass(chunks=8)
    result = p.run(_model(small_artifacts))
    assert not result.records and any("smaller than every chunk count" in s.reason for s in result.skipped)
    for bad in (1, (), (2, 0)):
        with pytest.raises(OnnxcompError, match="chunks"):
            ChunkedStemBackwardPass(chunks=bad)


@pytest.mark.parametrize("order", ORDERS)
def test_dpr_policy_trains_under_both_orders(small_artifacts: Path, tmp_path: Path, order: str) -> None:
    from onnxcomp.transform import transform

    out = tmp_path / f"dpr_{order}"
    result = transform(small_artifacts, out, "dpr-fp16", min_bytes=0)
    assert [c["site"] for c in result.chunked]
    assert STEM_INPUT not in {x["name"] for x in result.left_alone}
    settings = RuntimeSettings(execution_order=order)
    base = train(small_artifacts, steps=4, data="synthetic", seed=1, progress=False, settings=settings)
    lossy = train(out, steps=4, data="synthetic", seed=1, progress=False, settings=settings)
    assert lossy.losses[0] == base.losses[0]
    np.testing.assert_allclose(lossy.losses, base.losses, rtol=0.05)
