"""Make an exported transformer forward graph differentiable by ORT's gradient builder.

Two traps of the TorchScript exporter (TRAINING mode) meet ORT-training 1.19.2's gradient builder, which
reads a node's optional outputs by index (``gradient_builder_base.h:123 ... i < node_->OutputDefs().size()``):

- opset ≥ 17 exports ``nn.LayerNorm`` as one ``LayerNormalization`` with only its Y output; the builder's
  LayerNormalizationGrad wants the saved Mean and InvStdDev (outputs 1 and 2).
- ``scaled_dot_product_attention`` (what ``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer`` call in
  training) exports its attention dropout as a ``Dropout`` with no mask output; DropoutGrad needs the mask.

Both outputs are optional in the ONNX schema and computed by ORT's kernels anyway, so naming them on the
exported node is all it takes: the graph computes the same values, and the gradient builder finds what it
reads. ``repair_for_training`` does that on the forward graph, before ``generate_artifacts``.
"""
from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from onnxcomp.passes.editor import unique_name

_ONNX_DOMAINS = ("", "ai.onnx")


def _taken(graph: onnx.GraphProto) -> set[str]:
    return {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | \
        {i.name for i in graph.initializer} | {n.name for n in graph.node}


def repair_model_for_training(model: onnx.ModelProto) -> dict[str, int]:
    """Name the optional outputs ORT's gradient builder reads, in place. Returns counts per op type."""
    graph = model.graph
    taken = _taken(graph)
    fixed = {"LayerNormalization": 0, "Dropout": 0}
    for node in graph.node:
        if node.domain not in _ONNX_DOMAINS:
            continue
        base = (node.output[0] or node.name).replace("/", "_").strip("_")
        if node.op_type == "LayerNormalization" and len(node.output) < 3:
            missing = [("mean", 1), ("inv_std_dev", 2)][len(node.output) - 1:]
            for suffix, _ in missing:
                node.output.append(unique_name(f"{base}_{suffix}", taken))
            fixed["LayerNormalization"] += 1
        elif node.op_type == "Dropout" and len(node.output) < 2:
            mask = unique_name(f"{base}_mask", taken)
            node.output.append(mask)
            graph.value_info.append(helper.make_tensor_value_info(mask, TensorProto.BOOL, None))
            fixed["Dropout"] += 1
    return fixed


def repair_for_training(path: str | os.PathLike[str]) -> dict[str, int]:
    """``repair_model_for_training`` on an ONNX file, rewritten atomically only when something changed."""
    path = Path(path)
    model = onnx.load(str(path))
    fixed = repair_model_for_training(model)
    if any(fixed.values()):
        tmp = path.with_name(f".{path.name}.repair.tmp")
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    return fixed
