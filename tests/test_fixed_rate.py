"""The fixed-rate policies (``zfp-N``): which stashes the zfp codec takes, exact payload sizes in the plan,
training runs with losses close to the baseline, and the rate changes the error."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcomp.custom_ops import zfp
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import POLICIES
from onnxcomp.passes.fixed_rate import FixedRatePass
from onnxcomp.runtime.train import train
from onnxcomp.transform import transform


def test_policies_registered() -> None:
    assert {"zfp-4", "zfp-8", "zfp-16"} <= set(POLICIES)
    with pytest.raises(ValueError, match="rate"):
        FixedRatePass(rate=2)


def test_zfp_policy_encodes_float_stashes_and_trains(small_artifacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "zfp8"
    result = transform(small_artifacts, out, "zfp-8", min_bytes=0)
    by_codec: dict[str, list[dict]] = {}
    for r in result.records:
        by_codec.setdefault(r["codec"], []).append(r)
    assert by_codec.get("zfp") and "maxpool_index" in by_codec
    for r in by_codec["zfp"]:  # the plan's size is the payload's size: fixed rate, exact before any data
        layout = zfp.layout_of(tuple(r["shape"]))
        # the stash's name names it in op errors; the outlier payloads are sized by the data: the payload store
        # holds them (ORT would allocate them outside its memory pattern)
        assert r["params"] == {"rate": 8, "tensor": r["tensor"], "store": "inline"}
        assert r["predicted_bytes"] == zfp.ZFP().predicted_nbytes(tuple(r["shape"]), rate=8)
        assert r["predicted_bytes"] <= 0.75 * r["original_bytes"] and layout.nblocks > 0
    model = onnx.load(str(out / "training_model.onnx"))
    decoders = {n.output[0] for n in model.graph.node if n.op_type == "OnnxcompDecode_zfp"}
    # ReluGrads (Mul(dY, mask) after passes/mask_grad.py) read sign bits, never a zfp decode
    masked = {r["node"] for r in result.all_records if r.pass_name == "mask_grad"}
    assert masked
    assert all(i not in decoders for n in model.graph.node if n.op_type == "ReluGrad" or n.name in masked
               for i in n.input)
    base = train(small_artifacts, steps=4, data="synthetic", seed=1, progress=False)
    lossy = train(out, steps=4, data="synthetic", seed=1, progress=False)
    assert lossy.losses[0] == base.losses[0]  # the forward pass is untouched
    assert all(math.isfinite(v) for v in lossy.losses)
    assert np.allclose(lossy.losses, base.losses, rtol=0.05)


def test_rate_sets_the_size_and_small_planes_are_left_alone(small_artifacts: Path, tmp_path: Path) -> None:
    low = transform(small_artifacts, tmp_path / "z4", "zfp-4", min_bytes=0)
    high = transform(small_artifacts, tmp_path / "z16", "zfp-16", min_bytes=0)
    size = lambda res: {r["tensor"]: r["predicted_bytes"] for r in res.records if r["codec"] == "zfp"}  # noqa: E731
    assert size(low).keys() == size(high).keys()
    for t in size(low):
        assert size(low)[t] < size(high)[t]


@pytest.mark.parametrize("shape,rate,taken", [((32, 64, 16, 16), 8, True), ((32, 64, 7, 7), 8, True),
                                              ((32, 512, 2, 2), 8, False), ((32, 512, 1, 1), 8, True),
                                              ((32, 64, 16, 16), 16, True), ((32, 64, 3, 3), 16, False)])
def test_padding_cost_decides(shape: tuple[int, ...], rate: int, taken: bool) -> None:
    from onnxcomp.passes.fixed_rate import payload_share

    share = payload_share(shape, rate)
    assert share >= rate / 32
    assert (share <= 0.75) == taken


def test_unknown_rate_policy_is_a_clear_error(small_artifacts: Path, tmp_path: Path) -> None:
    with pytest.raises(OnnxcompError, match="zfp-8"):
        transform(small_artifacts, tmp_path / "x", "zfp-7")
