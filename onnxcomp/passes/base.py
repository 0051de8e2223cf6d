"""What every graph pass shares: the result type, and graph-editing helpers that keep ORT's order right."""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_ir as ir
from onnx_ir import passes as ir_passes

from ..errors import OnnxcompError

from ..custom_ops import contract
from ..metadata import PLAN_METADATA_KEY  # noqa: F401  (re-export)
from .editor import TRIGGER_CONSTANTS, unique_name  # noqa: F401  (re-export)
from .records import PassRecord

CUSTOM_DOMAIN = contract.DOMAIN  # re-export


@dataclass
class Skipped:
    name: str
    pattern: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "pattern": self.pattern, "reason": self.reason}


@dataclass
class PassResult:
    """What a pass did: the model, its records (one schema, passes.records) and the candidates it left.

    ``modified``: the pass changed the graph — every change is recorded, so a pass with records modified
    it; ``changed`` covers edits no record describes (e.g. an order chain rebuilt in place)."""
    model: onnx.ModelProto
    records: list[PassRecord] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    changed: bool = False

    @property
    def modified(self) -> bool:
        return self.changed or bool(self.records)


def require_training_graph(model: onnx.ModelProto) -> None:
    from ..analysis import find_boundary

    find_boundary(model.graph)  # raises OnnxcompError for an inference-only graph


def node_attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    """The value of ``node``'s attribute ``name``, or ``default`` when it is absent."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def even_bounds(n: int, k: int) -> list[int]:
    """``k + 1`` bounds cutting ``range(n)`` into ``k`` spans whose lengths differ by at most one."""
    return [round(i * n / k) for i in range(k + 1)]


def check_model(model: onnx.ModelProto, where: str) -> None:
    """onnx.checker (with shape inference) on a rewritten graph.

    ORT puts a few training ops with no ONNX schema (MaxPoolGrad) in the default domain, which the checker
    rejects even in untouched graphs; a copy with those moved to com.microsoft is checked instead, so
    everything else — names, topological order, types, our custom ops' wiring — is verified.
    """
    import onnx.defs

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    # Also ops ONNX defines only at a later opset: ORT's optimizer writes its own LayerNormalization
    # (registered from opset 1) into opset-16 transformer graphs.
    version = next((o.version for o in probe.opset_import if o.domain in ("", "ai.onnx")), 1)
    for node in probe.graph.node:
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type, version, ""):
            node.domain = "com.microsoft"
    try:
        onnx.checker.check_model(probe, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise OnnxcompError(f"{where}: the rewritten graph failed onnx.checker: {str(exc).splitlines()[0]}") from None


# ---------------------------------------------------------------------------------------------------------
# Passes on onnx-ir: one IR per transform, composed with onnx-ir's PassManager.

class PassPreconditionError(OnnxcompError, ir_passes.PreconditionError):
    """A pass's ``requires`` failed: the graph is not one this pass can rewrite (one line: what, where)."""


class PassPostconditionError(OnnxcompError, ir_passes.PostconditionError):
    """A pass's ``ensures`` failed: the rewritten graph breaks a rule (a bug in the pass, not the input)."""


@dataclass
class PassOutcome(ir_passes.PassResult):
    """onnx-ir's ``PassResult(model, modified)`` with what the pass did: its records and the candidates it
    left. ``modified`` is honest: False when the graph is exactly as before."""
    records: list[PassRecord] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


@dataclass
class RunLog:
    """The per-run record sink: every pass of one run appends what it did here (PassManager keeps only the
    last result). Lives in the model's ``meta`` (never serialised) for the run."""
    records: list[PassRecord] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    modified_by: list[str] = field(default_factory=list)

    def extend(self, other: "RunLog") -> None:
        """Append a later run's records (passes run apart from this run, after it)."""
        self.records += other.records
        self.skipped += other.skipped
        self.modified_by += other.modified_by

    def collect(self, name: str, outcome: PassOutcome) -> None:
        self.records += outcome.records
        self.skipped += [s.to_dict() | {"pass": name} for s in outcome.skipped]
        if outcome.modified:
            self.modified_by.append(name)


_RUN_LOG_KEY = "onnxcomp.run_log"


def run_log_of(model: ir.Model) -> RunLog:
    log = model.meta.get(_RUN_LOG_KEY)
    if log is None:
        log = model.meta[_RUN_LOG_KEY] = RunLog()
    return log


class OnnxcompPass(ir_passes.InPlacePass):
    """An onnxcomp rewrite as an onnx-ir in-place pass: ``call(model) -> PassOutcome(model, modified, ...)``.

    ``requires``: a training graph (and, with ``needs_static_parameters``, parameters of static shape).
    ``ensures``: the rewritten graph passes onnx.checker (wiring alone for a pass without ``full_check``)
    and every decoder and recompute clone is gated
    (cannot run before backward) — checked once per graph state, so a pass that changed nothing costs
    nothing. Errors of either are onnxcomp's one-line errors. Graph facts come from ``analysis_of(model)``
    (cached; dropped when a pass reports ``modified``); records go to the run's ``RunLog``.
    """

    name: str
    needs_static_parameters: bool = False
    # False for a pass that only reorders nodes (eager_accumulation also appends its bool And chain): it is
    # checked for wiring (topological order) and gates, without the full onnx.checker.
    full_check: bool = True

    def requires(self, model: ir.Model) -> None:
        from ..analysis import TensorClass, find_boundary
        from ..analysis.cached import state_of

        state = state_of(model)
        try:   # a training graph: the boundary finds a backward pass (cheap; the full analysis only if cached)
            analysis = state.analysis
            if analysis is None:
                find_boundary(model.graph)
        except OnnxcompError as exc:
            raise PassPreconditionError(f"{self.name} pass: {exc}") from None
        if self.needs_static_parameters:
            from ..analysis.cached import analysis_of

            analysis = analysis_of(model)
            dynamic = [n for n, t in analysis.tensors.items() if t.cls is TensorClass.PARAMETER and t.shape is None]
            if dynamic:
                raise PassPreconditionError(f"{self.name} pass: parameter {dynamic[0]!r} has no static shape; "
                                            "export the model with fixed parameter shapes")

    def ensures(self, model: ir.Model) -> None:
        from ..analysis import find_boundary
        from ..analysis.cached import state_of
        from ..validate import wiring_problems

        state = state_of(model)
        if state.checked:
            return
        where = f"{self.name} pass"
        # onnx.checker and the wiring check read protobuf: the one place a pass's graph state is serialised.
        if not self.full_check:
            problems = wiring_problems(state.proto)
            if problems:
                raise PassPostconditionError(f"{where}: the rewritten graph is mis-wired: {problems[0]}")
        else:
            try:
                check_model(state.proto, where)
            except OnnxcompError as exc:
                raise PassPostconditionError(str(exc)) from None
        analysis = state.analysis
        boundary = analysis.boundary if analysis is not None else find_boundary(model.graph, where)
        ungated = ungated_nodes(list(state.proto.graph.node), boundary)
        if ungated:
            raise PassPostconditionError(f"{where}: node {ungated[0]!r} (a decoder or recompute clone) can run "
                                         "before backward starts: nothing it reads comes from backward")
        state.checked = True

    def __call__(self, model_or_result: ir.Model | ir_passes.PassResult, /) -> PassOutcome:
        model = model_or_result.model if isinstance(model_or_result, ir_passes.PassResult) else model_or_result
        from ..analysis.cached import current_state, invalidate

        self.requires(model)
        before = current_state(model)
        outcome = self.call(model)
        if not isinstance(outcome, PassOutcome) or outcome.model is not model:
            raise ir_passes.PassError(f"{self.name}: call() must return PassOutcome(model, ...) for the model "
                                      "it was given (an in-place pass)")
        if outcome.modified:
            invalidate(model, unless_replaced_since=before)
        run_log_of(model).collect(self.name, outcome)
        self.ensures(model)
        return outcome

    @abstractmethod
    def call(self, model: ir.Model) -> PassOutcome: ...

    def run(self, model: onnx.ModelProto) -> PassResult:
        """This pass on a ``ModelProto`` (for callers outside a transform): one load into onnx-ir, one
        serialisation; ``model`` is not mutated."""
        from ..analysis.cached import adopt_snapshot, snapshot_of

        ir_model = ir.serde.deserialize_model(model)
        adopt_snapshot(ir_model, model, checked=True)
        outcome = self(ir_model)
        out = snapshot_of(ir_model)
        if out is model:          # unchanged: still a model of the caller's own (the input is never mutated)
            out = self.copy_proto(model)
        return PassResult(out, outcome.records, outcome.skipped, changed=outcome.modified)

    @staticmethod
    def copy_proto(model: onnx.ModelProto) -> onnx.ModelProto:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out


def run_passes(model: ir.Model, passes: list[OnnxcompPass]) -> RunLog:
    """Run ``passes`` in order on ``model`` (in place) with onnx-ir's PassManager; returns the run's records.
    An onnxcomp error inside a pass comes out as itself (one line), not wrapped in PassManager's errors."""
    outer = model.meta.get(_RUN_LOG_KEY)     # a run inside a pass (auto) keeps the enclosing run's log
    log = model.meta[_RUN_LOG_KEY] = RunLog()
    try:
        if passes:
            ir_passes.PassManager(list(passes), steps=1)(model)
    except ir_passes.PassError as exc:
        cause: BaseException | None = exc
        while isinstance(cause, ir_passes.PassError) and cause.__cause__ is not None:
            cause = cause.__cause__
        raise cause from None
    finally:
        if outer is None:
            del model.meta[_RUN_LOG_KEY]
        else:
            model.meta[_RUN_LOG_KEY] = outer
    return log


def ungated_nodes(nodes: list[onnx.NodeProto], boundary: Any) -> list[str]:
    """Names of decoders and recompute clones that nothing made in backward feeds (by data flow: the
    boundary of ``nodes``' graph): ORT could run them during the forward pass, holding their output as long
    as the stash they replace."""
    bad = []
    for k, node in enumerate(nodes):
        if node.op_type == "Shape":  # a gate's Shape(value) (dynamic shapes): a few int64s, fine in forward
            continue
        if FORWARD_DECODER_MARK in node.name:   # decodes for a forward reader on purpose (hoist_dropout)
            continue
        is_decoder = (op := contract.codec_op(node.domain, node.op_type)) is not None and op.role == "decode"
        if (is_decoder or CLONE_MARK in node.name) and not boundary.is_backward(k):
            bad.append(node.name)
    return bad


# Recompute clones are named "<node>__recompute" (passes.recompute).
CLONE_MARK = "__recompute"
# Decoders a forward reader waits for (passes.hoist_dropout: a mask drawn at the step's start) carry this.
FORWARD_DECODER_MARK = "__forward_decode"
