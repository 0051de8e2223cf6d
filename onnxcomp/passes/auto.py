"""Pass: the auto planner (onnxcomp/planner/auto.py) — per stash and backward region, the cheapest technique
whose predicted training-step peak fits a budget; BudgetError (exit 2) when none does.

The planner tries its pipelines on copies; the chosen one then runs on the model itself through the common
interface (``run_passes``: onnx-ir passes directly, protobuf ones behind the adapter), so ``modified`` is
what those passes did: False when the plan changes nothing."""
from __future__ import annotations

import onnx_ir as ir

from ..errors import OnnxcompError
from .base import OnnxcompPass, PassOutcome, Skipped, run_passes
from .records import PassRecord


class AutoPass(OnnxcompPass):
    """budget_bytes: the training step's peak to fit (as `onnxcomp measure` reports it by default);
    exact: only bit-identical techniques; min_bytes: smallest stash worth an encoder."""

    name = "auto"

    def __init__(self, budget_bytes: int | None = None, exact: bool = False, min_bytes: int = 64 * 1024) -> None:
        if not budget_bytes:
            raise OnnxcompError("policy 'auto' needs a memory budget ({budget_bytes}), e.g. 64MiB",
                                options=("budget_bytes",))
        self.budget_bytes = int(budget_bytes)
        self.exact = bool(exact)
        self.min_bytes = int(min_bytes)

    def call(self, model: ir.Model) -> PassOutcome:
        from ..analysis.cached import snapshot_of
        from ..planner.auto import BudgetError, plan_auto

        plan = plan_auto(snapshot_of(model), self.budget_bytes, exact=self.exact, min_bytes=self.min_bytes)
        if not plan.fits:
            raise BudgetError(plan.failure_line())
        log = run_passes(model, plan.passes)
        skipped = [Skipped(s["name"], s["pattern"], s["reason"]) for s in log.skipped]
        records = [*log.records, PassRecord("planned", self.name, "auto", plan.summary())]
        return PassOutcome(model, bool(log.modified_by), records, skipped)
