"""Before analysis: fix a dynamic batch, refuse graphs that are not training graphs, and refuse to rewrite a
graph whose stashes have unknown sizes (a dynamic batch nobody fixed would otherwise give "0 encoded")."""
from __future__ import annotations

import onnx

from .errors import OnnxcompError

# The optimizer graph generate_artifacts writes beside the training graph: same directory, easy to pass.
_OPTIMIZER_OPS = {"AdamWOptimizer", "AdamOptimizer", "SGDOptimizer", "SGDOptimizerV2", "LambOptimizer"}


def dynamic_inputs(model: onnx.ModelProto) -> list[str]:
    """Graph inputs whose first dimension is symbolic (or missing a value): the batch axis of a dynamic export."""
    out = []
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            out.append(vi.name)
    return out


def static_batch_of(model: onnx.ModelProto) -> int | None:
    """The exported batch of a static graph (first dim of its data inputs, as the analysis finds them)."""
    from .analysis import analyze_model

    return analyze_model(model).batch


def fix_batch(model: onnx.ModelProto, batch: int, where: str = "model") -> onnx.ModelProto:
    """Copy of ``model`` whose dynamic batch axis is ``batch``: every graph input with a symbolic first dim
    gets ``batch``, and so does that dimension's symbol wherever a declared shape uses it.
    A graph that already has a static batch is returned as is when it matches, refused when it differs
    (its Reshape constants were traced for that batch)."""
    if batch < 1:
        raise OnnxcompError(f"--batch {batch}: use a positive batch size")
    dynamic = dynamic_inputs(model)
    if not dynamic:
        exported = static_batch_of(model)
        if exported is not None and exported != batch:
            raise OnnxcompError(f"{where} was exported with a static batch of {exported}, not {batch}; drop --batch "
                                f"or re-export with batch {batch}")
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    symbols = {vi.type.tensor_type.shape.dim[0].dim_param for vi in m.graph.input if vi.name in dynamic} - {""}
    for vi in m.graph.input:
        if vi.name in dynamic:
            dim = vi.type.tensor_type.shape.dim[0]
            dim.Clear()
            dim.dim_value = batch
    # The declared intermediate shapes must stay (ORT-training 1.19.2 crashes natively, SIGSEGV, on this
    # training graph without them): the batch symbol in them becomes the number.
    for vi in list(m.graph.value_info) + list(m.graph.output):
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in symbols:
                dim.Clear()
                dim.dim_value = batch
    return m


def check_training_graph(model: onnx.ModelProto, where: str) -> None:
    """Refuse ORT's optimizer model, which a directory listing makes easy to pass by mistake."""
    ops = {n.op_type for n in model.graph.node}
    if ops & _OPTIMIZER_OPS:
        raise OnnxcompError(f"{where} is ORT's optimizer model ({', '.join(sorted(ops & _OPTIMIZER_OPS))}), not a "
                            "training graph: it stashes nothing; pass training_model.onnx or the artifact directory")


def unresolved_stashes(model: onnx.ModelProto, where: str = "model") -> list[str]:
    """Stashed tensors whose size analysis could not resolve (their bytes count as 0 everywhere)."""
    from .analysis import analyze_model

    return [s.name for s in analyze_model(model, where=where).stashed if s.nbytes == 0 and s.shape is None]


def prepare_for_transform(model: onnx.ModelProto, where: str, *, batch: int | None = None,
                          allow_unresolved: bool = False) -> onnx.ModelProto:
    """The one place a graph is made ready for the passes: training graph check, batch fix, size check."""
    check_training_graph(model, where)
    if batch is not None:
        model = fix_batch(model, batch, where)
    if not allow_unresolved:
        missing = unresolved_stashes(model, where)
        if missing:
            dynamic = dynamic_inputs(model)
            hint = (f"its inputs {dynamic[:3]} have a dynamic batch: pass --batch N (the batch you train with)"
                    if dynamic else "check the export")
            raise OnnxcompError(
                f"{where}: {len(missing)} stashed tensor(s) have no resolved shape (e.g. {missing[0]}), so no pass "
                f"can size or encode them; {hint}, or --allow-unresolved to rewrite the rest anyway"
            )
    return model
