"""A losslessly transformed graph trains bit-identically to the original: losses and final parameters."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from onnxcomp.runtime.train import train
from onnxcomp.transform import transform

STEPS = 10


def assert_bit_identical(art: Path, model_file: str, steps: int = STEPS) -> None:
    base = train(art, steps=steps, data="synthetic", seed=3, progress=False, return_parameters=True)
    enc = train(art, model=model_file, steps=steps, data="synthetic", seed=3, progress=False,
                return_parameters=True)
    assert len(set(base.losses)) > 1, "data must vary between steps"
    assert base.losses == enc.losses
    assert base.parameters.dtype == enc.parameters.dtype == np.float32
    assert np.array_equal(base.parameters.view(np.uint32), enc.parameters.view(np.uint32))


@pytest.mark.parametrize("policy, expected", [
    ("lossless", {None}),                                         # cheap layers recomputed, no codec needed
    ("lossless-encode", {"bitmask", "maxpool_index", "sparse"}),  # the encodings alone (ReLU masks: bitmask)
])
def test_small_cnn_lossless_is_bit_identical(small_artifacts: Path, tmp_path: Path, policy: str,
                                             expected: set[str]) -> None:
    out = tmp_path / policy
    result = transform(small_artifacts, out, policy, min_bytes=0)
    assert {r["codec"] for r in result.records} == expected
    plan = json.loads(result.plan_path.read_text())
    assert plan["after"]["stashed_bytes"] < plan["before"]["stashed_bytes"]
    assert_bit_identical(out, "training_model.onnx")


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2",
                                  pytest.param("alexnet", marks=pytest.mark.slow),
                                  pytest.param("vgg16", marks=pytest.mark.slow),
                                  pytest.param("resnet50", marks=pytest.mark.slow)])
def test_zoo_lossless_is_bit_identical(name: str, tmp_path: Path) -> None:
    from onnxcomp.models.artifacts import generate_artifacts

    image = 64 if name == "alexnet" else 32
    art = generate_artifacts(name, 4, image, 10, tmp_path / name, smoke_test=False).out_dir
    for policy in ("lossless", "lossless-encode"):
        result = transform(art, art / f"{policy}.onnx", policy)
        assert result.records, f"the {policy} policy must find something to encode"
        assert_bit_identical(art, f"{policy}.onnx")
