"""Artifact-set rewrites that go beyond the training graph: a weight split into row blocks (SplitWeightPass)
needs its blocks in the checkpoint and the eval model; and the user wants the original parameters back."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from onnxcomp.errors import OnnxcompError
from onnxcomp.fileio import atomic_output
from onnxcomp.passes.split_weight import (WeightSplit, merge_arrays, record_splits, split_array, split_forward_gemm,
                                          splits_of)


def write_split_checkpoint(src: Path, dst: Path, splits: list[WeightSplit]) -> None:
    """Copy the checkpoint at ``src`` to ``dst`` (atomically) with every split weight replaced by its blocks.

    Trainable and frozen parameters and the properties are carried; optimizer state is not (a checkpoint
    straight from generate_artifacts has none; a saved one restarts its Adam moments at zero).
    """
    from onnxruntime.training.api import CheckpointState
    from onnxruntime.training.onnxblock.checkpoint_utils import save_checkpoint

    state = CheckpointState.load_checkpoint(str(src))
    by_name = {s.parameter: s for s in splits}
    trainable: list[onnx.TensorProto] = []
    frozen: list[onnx.TensorProto] = []
    seen = set()
    for name, param in state.parameters:
        target = trainable if param.requires_grad else frozen
        if name in by_name:
            if not param.requires_grad:
                raise OnnxcompError(f"{src}: {name} is frozen in the checkpoint; only trainable weights are split")
            seen.add(name)
            target += [onnx.numpy_helper.from_array(v, p) for p, v in split_array(param.data, by_name[name]).items()]
        else:
            target.append(onnx.numpy_helper.from_array(np.asarray(param.data), name))
    missing = set(by_name) - seen
    if missing:
        raise OnnxcompError(f"{src}: the training graph splits {sorted(missing)}, which the checkpoint does not "
                            "hold; transform the artifact directory the graph came from")
    with atomic_output(dst) as tmp:
        save_checkpoint((trainable, frozen), tmp)
        properties = list(state.properties)
        if properties:
            new = CheckpointState.load_checkpoint(tmp)
            for key, value in properties:
                new.properties[key] = value
            CheckpointState.save_checkpoint(new, tmp)


def write_split_eval_model(src: Path, dst: Path, splits: list[WeightSplit]) -> None:
    """The eval model with each split weight's forward Gemm read from the blocks (atomically)."""
    import onnx_ir as ir

    model = ir.serde.deserialize_model(onnx.load(str(src)))
    from onnxcomp.passes.split_conv_weight import split_forward_conv

    for split in splits:
        rewrite = split_forward_conv if len(split.shape) == 4 else split_forward_gemm   # conv weights: [O, I, kh, kw]
        if not rewrite(model.graph, split):
            raise OnnxcompError(f"{src}: no {'Conv' if len(split.shape) == 4 else 'Gemm'}(X, {split.parameter}) "
                                "to split in the eval model")
    record_splits(model, splits)
    with atomic_output(dst) as tmp:
        onnx.save(ir.serde.serialize_model(model), tmp)


def write_split_artifacts(src_dir: Path, out_dir: Path, splits: list[WeightSplit], *, force: bool = False) -> None:
    """Checkpoint and eval model of ``src_dir`` rewritten for ``splits`` into ``out_dir`` (which must differ)."""
    if src_dir.resolve() == out_dir.resolve():
        raise OnnxcompError(f"{out_dir}: splitting weights rewrites the checkpoint; write to another directory "
                            "({output}) so the original artifacts stay intact", options=("output",))
    if (out_dir / "checkpoint").exists() and not force:
        raise OnnxcompError(f"{out_dir / 'checkpoint'} already exists; allow replacing it with {{force}} or "
                            "choose another {output}", options=("force", "output"))
    write_split_checkpoint(src_dir / "checkpoint", out_dir / "checkpoint", splits)
    if (src_dir / "eval_model.onnx").exists():
        write_split_eval_model(src_dir / "eval_model.onnx", out_dir / "eval_model.onnx", splits)


def merged_parameters(artifact_dir: str | os.PathLike[str], model: str | os.PathLike[str] | None = None,
                      checkpoint: str | os.PathLike[str] | None = None) -> dict[str, np.ndarray]:
    """Every parameter of a checkpoint by the user's original names: split weights' blocks concatenated.

    ``model``: the training graph that records the splits (default: the directory's training_model.onnx);
    ``checkpoint``: e.g. one saved after training (default: the directory's checkpoint).
    """
    from onnxruntime.training.api import CheckpointState

    from onnxcomp.load import load_model

    splits = splits_of(load_model(artifact_dir, None if model is None else str(model)).model)
    ckpt = Path(checkpoint) if checkpoint is not None else Path(artifact_dir) / "checkpoint"
    if not ckpt.exists():
        raise OnnxcompError(f"{ckpt}: checkpoint not found")
    from onnxcomp.passes.arena_spacer import is_spacer

    # spacer parameters (passes/arena_spacer.py) are onnxcomp's, not the user's
    params = {name: np.asarray(p.data) for name, p in CheckpointState.load_checkpoint(str(ckpt)).parameters
              if not is_spacer(name)}
    for split in reversed(splits):   # a block split again later is merged back first
        params[split.parameter] = merge_arrays(params, split)
        for part in split.parts:
            del params[part]
    return params
