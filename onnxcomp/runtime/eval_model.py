"""The one repair of onnxblock's eval model (used when artifacts are generated and when `train` evaluates).

onnxblock flips BatchNormalization to training_mode=0 in the eval graph but keeps the running-mean/var
outputs, which ORT rejects ("number of op outputs should be 1 when Training_mode = False"). Those outputs feed
nothing, so they are dropped; inference-mode BN then uses the running statistics, which the training graph
updates in the checkpoint state. The eval model also returns only the loss; exposing the logits as a second
output lets ``Module.eval()`` serve predictions and accuracy without another export.
"""
from __future__ import annotations

import os
from pathlib import Path

import onnx

from onnxcomp.errors import OnnxcompError


def drop_inference_batchnorm_outputs(model: onnx.ModelProto, where: str | os.PathLike[str] = "eval model") -> int:
    """Drop the running-statistics outputs of inference-mode BatchNormalization nodes (in place); returns how
    many nodes changed. Outputs that something consumes cannot go: OnnxcompError."""
    consumed = {i for node in model.graph.node for i in node.input} | {o.name for o in model.graph.output}
    changed = 0
    for node in model.graph.node:
        if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx") or len(node.output) <= 1:
            continue
        if next((a.i for a in node.attribute if a.name == "training_mode"), 0):
            continue
        used = [o for o in node.output[1:] if o and o in consumed]
        if used:
            raise OnnxcompError(
                f"eval model {where}: BatchNormalization {node.name!r} outputs {used} are consumed, "
                "so they cannot be dropped; regenerate the artifacts from a standard export"
            )
        del node.output[1:]
        changed += 1
    if changed:
        value_names = {o for node in model.graph.node for o in node.output}
        kept = [vi for vi in model.graph.value_info if vi.name in value_names or vi.name in consumed]
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept)
    return changed


def loss_logits(model: onnx.ModelProto) -> str | None:
    """The logits the graph's SoftmaxCrossEntropyLoss reads (None without one)."""
    logits = None
    for node in model.graph.node:
        if node.op_type == "SoftmaxCrossEntropyLoss":
            logits = node.input[0]
    return logits


def expose_output(model: onnx.ModelProto, name: str, where: str | os.PathLike[str] = "eval model") -> bool:
    """Make tensor ``name`` a graph output after the existing ones (in place); False if it already is one."""
    if name in {o.name for o in model.graph.output}:
        return False
    if name not in {o for node in model.graph.node for o in node.output}:
        raise OnnxcompError(f"eval model {where}: no tensor named {name!r} to expose as an output")
    model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return True


def repair_eval_model(src: str | os.PathLike[str], dst: str | os.PathLike[str] | None = None, *,
                      output: str | None = None) -> int:
    """Repair the eval model ``src`` and write it to ``dst`` (default: ``src`` itself, replaced atomically):
    inference BatchNormalization outputs dropped, and tensor ``output`` exposed when given. Writes only when
    something changed or ``dst`` is another file. Returns how many BatchNormalization nodes changed."""
    from onnxcomp.fileio import atomic_output

    src = Path(src)
    target = Path(dst) if dst is not None else src
    model = onnx.load(str(src))
    changed = drop_inference_batchnorm_outputs(model, src)
    exposed = expose_output(model, output, src) if output is not None else False
    if changed or exposed or target != src:
        with atomic_output(target) as tmp:
            onnx.save(model, tmp)
    return changed


def evaluation_model(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str | None:
    """A loadable copy of ``src`` at ``dst`` that also outputs the loss's logits, for accuracy; None when it
    was written, else why not (no eval model, no SoftmaxCrossEntropyLoss logits, BN outputs in use)."""
    src = Path(src)
    if not src.exists():
        return f"{src} missing"
    model = onnx.load(str(src))
    logits = loss_logits(model)
    if logits is None:
        return f"no SoftmaxCrossEntropyLoss logits in {src}"
    try:
        drop_inference_batchnorm_outputs(model, src)
    except OnnxcompError as exc:
        return str(exc)
    expose_output(model, logits, src)
    onnx.save(model, str(dst))
    return None
