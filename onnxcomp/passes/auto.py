"""Pass: the auto planner (onnxcomp/planner/auto.py) — per stash and backward region, the cheapest technique
whose predicted training-step peak fits a budget; BudgetError (exit 2) when none does.

The planner tries each candidate pipeline on an onnx-ir copy of the graph through the common interface
(``run_passes``: onnx-ir passes directly, protobuf ones behind the adapter); the chosen run's graph becomes
the model's (as defer_weight_grad and chunk_backward keep their accepted trial), with that run's records.
``modified`` is what those passes did: False when the plan changes nothing."""
from __future__ import annotations

import onnx_ir as ir

from ..errors import OnnxcompError
from .base import OnnxcompPass, PassOutcome, Skipped
from .records import PassRecord


class AutoPass(OnnxcompPass):
    """budget_bytes: the training step's peak to fit (as `onnxcomp measure` reports it by default), or with
    budget_for="ort-defaults" the process's growth under ORT's default session settings (planner/growth_budget.py),
    "ort-defaults-total" that growth plus the set-up the transform adds over the untouched graph's;
    exact: only bit-identical techniques; min_bytes: smallest stash worth an encoder;
    margin: the share of the budget a plan is planned under it (None: the planner's default for the figure,
    planner/auto.DEFAULT_MARGIN for the step peak, planner/growth_budget.GROWTH_MARGIN for the growth modes; a
    smaller one where a measurement checks the plan, `transform --verify`)."""

    name = "auto"

    def __init__(self, budget_bytes: int | None = None, exact: bool = False, min_bytes: int = 64 * 1024,
                 budget_for: str = "step-peak", margin: float | None = None) -> None:
        if not budget_bytes:
            raise OnnxcompError("policy 'auto' needs a memory budget ({budget_bytes}), e.g. 64MiB",
                                options=("budget_bytes",))
        self.budget_bytes = int(budget_bytes)
        self.exact = bool(exact)
        self.min_bytes = int(min_bytes)
        from ..planner.growth_budget import BUDGET_FOR

        if budget_for not in BUDGET_FOR:
            raise OnnxcompError(f"budget_for {budget_for!r}: use one of {', '.join(BUDGET_FOR)}",
                                options=("budget_for",))
        self.budget_for = budget_for
        from ..planner.growth_budget import check_margin

        self.margin = None if margin is None else check_margin(margin)

    def call(self, model: ir.Model) -> PassOutcome:
        from ..analysis.cached import adopt_snapshot, snapshot_of, state_of
        from ..planner.auto import BudgetError, plan_auto

        from ..planner.growth_budget import GROWTH_MODES, default_pyops

        if self.budget_for in GROWTH_MODES:
            from ..planner.growth_budget import plan_for_growth

            plan = plan_for_growth(snapshot_of(model), self.budget_bytes, exact=self.exact, min_bytes=self.min_bytes,
                                   budget_for=self.budget_for, pyops=default_pyops(self.budget_for),
                                   **({} if self.margin is None else {"margin": self.margin}))
        else:
            plan = plan_auto(snapshot_of(model), self.budget_bytes, exact=self.exact, min_bytes=self.min_bytes,
                             **({} if self.margin is None else {"margin": self.margin}))
        if not plan.fits:
            raise BudgetError(plan.failure_line(), predicted_peak=plan.predicted_peak, target=plan.target)
        assert plan.applied is not None
        run, log = plan.applied.ir_model, plan.applied.log
        modified = bool(log.modified_by)
        if modified:
            model.graph = run.graph               # the chosen run's graph (the model object stays: in place)
            model.metadata_props.clear()
            model.metadata_props.update(run.metadata_props)   # e.g. the custom-op set version of encoders
            adopt_snapshot(model, plan.applied.model, checked=state_of(run).checked)   # checked by its passes
        skipped = [Skipped(s["name"], s["pattern"], s["reason"]) for s in log.skipped]
        records = [*log.records, PassRecord("planned", self.name, "auto", plan.summary())]
        return PassOutcome(model, modified, records, skipped)
