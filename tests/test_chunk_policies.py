"""Chunked backward regions and the rows+encoding compositions on the "user-style" model of issue 12
(tests/user_style_model.py: Conv-BN-ReLU stem, MaxPool, a residual block, a Linear head): the region the
planner picks, the predicted peak, and training next to the untransformed graph."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import artifacts_from_net
from onnxcomp.passes import chunkable_regions
from onnxcomp.planner.predict import predicted_peak
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.train import train
from onnxcomp.transform import transform

pytestmark = pytest.mark.slow
STEM_INPUT = "/stem/stem.0/Conv_output_0"


@pytest.fixture(scope="module")
def user_art(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    from user_style_model import UserNet

    torch.manual_seed(0)
    return artifacts_from_net(UserNet(num_classes=10, width=16), tmp_path_factory.mktemp("user_style"), batch=8,
                              in_channels=3, height=24, width=24)


def test_regions_of_the_user_model(user_art: Path) -> None:
    model = onnx.load(str(user_art / "training_model.onnx"))
    regions = chunkable_regions(model, chunks=(2, 4))
    assert {r.op_types for r in regions} == {("ReluGrad", "BatchNormalizationGrad", "ConvGrad"),
                                             ("MaxPoolGrad", "ReluGrad", "BatchNormalizationGrad", "ConvGrad")}
    assert all(r.recomputed_input == STEM_INPUT and not r.exact for r in regions)
    # The stem's backward sets this model's peak: chunking it lowers the prediction.
    assert all(min(r.predicted_peak.values()) < r.predicted_peak_before for r in regions)


@pytest.mark.parametrize("order", ["priority", "default"])
def test_chunks_policy_trains_like_the_original(user_art: Path, tmp_path: Path, order: str) -> None:
    out = tmp_path / "chunks"
    result = transform(user_art, out, "chunks")
    (rec,) = result.chunked
    assert rec["exact"] is False and rec["dropped_stashes"] == [STEM_INPUT]
    new_model = onnx.load(str(out / "training_model.onnx"))
    assert predicted_peak(new_model) < predicted_peak(onnx.load(str(user_art / "training_model.onnx")))
    settings = RuntimeSettings(execution_order=order)
    base = train(user_art, steps=4, data="synthetic", seed=2, progress=False, settings=settings)
    new = train(out, steps=4, data="synthetic", seed=2, progress=False, settings=settings)
    assert new.losses[0] == base.losses[0]
    np.testing.assert_allclose(new.losses, base.losses, rtol=1e-4)


def test_rows_comet_keeps_the_stem_for_chunking(user_art: Path, tmp_path: Path) -> None:
    """No chain of this model lowers the predicted peak when split, so the composition leaves them whole and
    the stem region is chunked, as under comet alone."""
    out = tmp_path / "rows_comet"
    result = transform(user_art, out, "rows+comet", rows=2)
    assert not [t for t in result.section("tensors") if t.get("encoding") == "rows"]
    assert result.chunked and any("row-split" == s["pattern"] for s in result.skipped)
    lossy = train(out, steps=3, data="synthetic", seed=2, progress=False)
    base = train(user_art, steps=3, data="synthetic", seed=2, progress=False)
    assert lossy.losses[0] == base.losses[0]
    np.testing.assert_allclose(lossy.losses, base.losses, rtol=0.05)


def test_lossless_encode_plus_chunks(user_art: Path, tmp_path: Path) -> None:
    """No lossy codec: the lossless encodings and the chunked stem region together predict a lower peak than
    either alone, and training matches the original up to rounding."""
    from onnxcomp.transform import transform_model

    model = onnx.load(str(user_art / "training_model.onnx"))
    peaks = {p: predicted_peak(transform_model(model, p).model) for p in ("lossless-encode", "chunks",
                                                                            "encode+chunks")}
    assert peaks["encode+chunks"] < min(peaks["lossless-encode"], peaks["chunks"])
    out = tmp_path / "lec"
    result = transform(user_art, out, "encode+chunks")
    assert result.chunked and all(not c["exact"] for c in result.chunked)
    base = train(user_art, steps=3, data="synthetic", seed=4, progress=False)
    new = train(out, steps=3, data="synthetic", seed=4, progress=False)
    assert new.losses[0] == base.losses[0]
    np.testing.assert_allclose(new.losses, base.losses, rtol=1e-4)
