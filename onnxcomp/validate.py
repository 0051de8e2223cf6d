"""Validate a rewritten training graph by the rules ONNX Runtime runs it by.

``onnx.checker`` alone is the wrong judge of a training graph: ORT registers ops of its own in the ONNX
domain (MaxPoolGrad, and LayerNormalization from opset 1, which its optimizer writes back into opset-16
transformer graphs) and the checker rejects those although ORT runs them. Three checks, in order:

1. wiring (what ORT refuses first): every input made before it is read, every tensor made once;
2. ``onnx.checker`` (full check, shape inference) on a copy in which ops that ONNX does not define at the
   graph's opset are hidden from it — types and shapes of everything ONNX does know;
3. an ONNX Runtime session over the graph (optimizations off, onnxcomp's PyOps registered): ORT's own op
   registry, ONNX, contrib and training ops alike, decides on the rest.

A complaint that the untouched input graph earns too is ORT's convention, not onnxcomp's mistake, and does
not fail the rewrite.
"""
from __future__ import annotations

import onnx
import onnx.defs

from .errors import OnnxcompError

ONNX_DOMAINS = ("", "ai.onnx")
PYOP_DOMAIN = "ai.onnx.contrib"   # onnxruntime-extensions' PyOps: registered by the session options
_HIDDEN_DOMAIN = "com.microsoft.onnxcomp_probe"  # where ORT-only ops go so the checker skips them


def _norm(domain: str) -> str:
    return "" if domain in ONNX_DOMAINS else domain


def _onnx_knows(op: str, domain: str, version: int) -> bool:
    try:
        onnx.defs.get_schema(op, version, domain)
        return True
    except onnx.defs.SchemaError:
        return False


def ort_load_error(model: onnx.ModelProto) -> str | None:
    """What ONNX Runtime says when it loads ``model`` (its own op registry: ONNX, contrib and training ops,
    with onnxcomp's PyOps registered; no graph optimization), or None when it loads."""
    import onnxruntime as ort

    from .runtime.session import session_options

    so = session_options()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own pybind exception types
        return str(exc).splitlines()[0]
    return None


def _checker_probe(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with every op ONNX does not know at the graph's opset moved to a domain the checker skips."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    opsets = {_norm(o.domain): o.version for o in probe.opset_import}
    moved = False
    for node in probe.graph.node:
        domain = _norm(node.domain)
        if domain == "" and not _onnx_knows(node.op_type, "", opsets.get("", 1)):
            node.domain, moved = _HIDDEN_DOMAIN, True
    if moved:
        probe.opset_import.append(onnx.helper.make_opsetid(_HIDDEN_DOMAIN, 1))
    return probe


def checker_error(model: onnx.ModelProto) -> str | None:
    """First line of what onnx.checker (full check, shape inference) says about the probe, or None."""
    try:
        onnx.checker.check_model(_checker_probe(model), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        return str(exc).splitlines()[0]
    return None


def wiring_problems(model: onnx.ModelProto) -> list[str]:
    """Inputs read before anything produces them, and tensors produced twice (ORT refuses both)."""
    g = model.graph
    known = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    problems = []
    for node in g.node:
        missing = [i for i in node.input if i not in known]
        if missing:
            problems.append(f"node {node.name!r} ({node.op_type}) reads {missing[0]!r} before any node makes it")
        for o in node.output:
            if o and o in known:
                problems.append(f"tensor {o!r} is produced twice (again by {node.name!r})")
            known.add(o)
    missing_out = [o.name for o in g.output if o.name not in known]
    problems += [f"graph output {o!r} is never produced" for o in missing_out]
    return problems


def validate_rewritten(model: onnx.ModelProto, where: str, original: onnx.ModelProto | None = None, *,
                       ort_check: bool = True) -> None:
    """Raise OnnxcompError if ``model`` (onnxcomp's output) breaks a rule ORT runs by.

    ``original``: the graph onnxcomp was given; a complaint it shares is not onnxcomp's doing.
    ``ort_check``: also load the graph into an ONNX Runtime session (about 0.1 s for a transformer).
    """
    problems = wiring_problems(model)
    if problems:
        raise OnnxcompError(f"{where}: the rewritten graph is mis-wired: {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    error = checker_error(model)
    if error is not None and not (original is not None and checker_error(original) == error):
        raise OnnxcompError(f"{where}: the rewritten graph failed onnx.checker: {error}")
    if ort_check:
        error = ort_load_error(model)
        if error is not None and not (original is not None and ort_load_error(original) is not None):
            raise OnnxcompError(f"{where}: ONNX Runtime cannot load the rewritten graph: {error}")
