"""Pass: the auto planner (onnxcomp/planner/auto.py) — per stash and backward region, the cheapest technique
whose predicted training-step peak fits a budget; BudgetError (exit 2) when none does."""
from __future__ import annotations

import onnx

from ..errors import OnnxcompError
from .base import GraphPass, PassResult
from .records import PassRecord


class AutoPass(GraphPass):
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

    def run(self, model: onnx.ModelProto) -> PassResult:
        from ..planner.auto import BudgetError, plan_auto

        plan = plan_auto(model, self.budget_bytes, exact=self.exact, min_bytes=self.min_bytes)
        if not plan.fits:
            raise BudgetError(plan.failure_line())
        assert plan.model is not None
        records = [r for res in plan.results for r in res.records]
        skipped = [s for res in plan.results for s in res.skipped]
        records.append(PassRecord("planned", self.name, "auto", plan.summary()))
        return PassResult(plan.model, records, skipped, changed=True)
