"""One analysis per graph state: computed once, kept on the onnx-ir model, dropped only when a pass modifies it.

A transform runs many passes over one ``onnx_ir.Model``. The model carries (in ``model.meta``, which is never
serialised) its *state*: the ``GraphAnalysis`` of the graph as it is now, computed from the onnx-ir model
itself (``analyze_ir``: values' types and use/def links), and the graph as a ``ModelProto``, serialised only
when something needs protobuf: onnx.checker in a pass's ``ensures``, the transform's output, and readers still
on protobuf (``GraphAnalysis.model``, the planner's proto entry points). A pass that reports ``modified``
drops the state (``invalidate``); a pass that changed nothing leaves it, so the next pass reads the same
analysis for free.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import onnx
import onnx_ir as ir

from .training_graph import GraphAnalysis, analyze_ir, analyze_model

_STATE_KEY = "onnxcomp.state"


@dataclass(eq=False)
class ModelState:
    """One graph state and what has been derived from it (each made lazily)."""
    model: ir.Model
    snapshot: onnx.ModelProto | None = None    # the graph as a ModelProto, never mutated once made
    analysis: GraphAnalysis | None = None
    checked: bool = False     # the postconditions (checker, gates) hold for this state

    @property
    def proto(self) -> onnx.ModelProto:
        """The ``ModelProto`` of this state (serialised on first use). Protobuf is needed for onnx.checker,
        for saving, and by readers not yet on onnx-ir."""
        if self.snapshot is None:
            self.snapshot = ir.serde.serialize_model(self.model)
            _BY_PROTO[id(self.snapshot)] = self
        return self.snapshot


# Snapshot protos handed out → their state (weak: a state lives as long as its model keeps it).
_BY_PROTO: weakref.WeakValueDictionary[int, ModelState] = weakref.WeakValueDictionary()


def _state(model: ir.Model) -> ModelState:
    state = model.meta.get(_STATE_KEY)
    if state is None:
        state = model.meta[_STATE_KEY] = ModelState(model)
    return state


def adopt_snapshot(model: ir.Model, proto: onnx.ModelProto, *, checked: bool = False) -> ModelState:
    """Declare ``proto`` the ``ModelProto`` of ``model``'s current graph (it must be exactly that graph, and is
    never mutated afterwards). Saves a serialisation when the proto is at hand: the input of a transform, or
    the graph a planner's trial run produced."""
    state = ModelState(model, proto, checked=checked)
    model.meta[_STATE_KEY] = state
    _BY_PROTO[id(proto)] = state
    return state


def snapshot_of(model: ir.Model) -> onnx.ModelProto:
    """The ``ModelProto`` of ``model``'s current graph (serialised once per state). Read-only."""
    return _state(model).proto


def state_of(model: ir.Model) -> ModelState:
    return _state(model)


def analysis_of(model: ir.Model | onnx.ModelProto) -> GraphAnalysis:
    """The analysis of ``model``'s current graph, computed from the onnx-ir model at most once per graph state.

    A ``ModelProto`` is looked up by identity: a state's own snapshot shares that state's cached analysis; any
    other proto is analysed afresh (nothing is cached for it)."""
    if isinstance(model, onnx.ModelProto):
        state = _BY_PROTO.get(id(model))
        if state is None or state.snapshot is not model:
            return analyze_model(model)
    else:
        state = _state(model)
    if state.analysis is None:
        state.analysis = analyze_ir(state.model, proto=state.snapshot, snapshot=lambda: state.proto)
    return state.analysis


def current_state(model: ir.Model) -> ModelState | None:
    """The state cached on ``model`` now, if any (made by nothing)."""
    return model.meta.get(_STATE_KEY)


def invalidate(model: ir.Model, unless_replaced_since: ModelState | None = None) -> None:
    """Forget the snapshot and analysis of ``model`` (its graph has changed). With ``unless_replaced_since``
    (the state before the change): keep a state that the change itself adopted (``adopt_snapshot``)."""
    state = model.meta.get(_STATE_KEY)
    if state is not None and (unless_replaced_since is None or state is unless_replaced_since):
        del model.meta[_STATE_KEY]
