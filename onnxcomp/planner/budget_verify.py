"""`transform --policy auto --budget B --verify`: the budget checked by measurement, not only by prediction.

The planner's budget is met on its models' predictions (the step peak: planner/predict.py; the growth under ORT's
defaults: planner/ort_growth.py). Both models leave memory out that they do not know about (docs/notes/
budgetguard.md: 0.5-1 MiB of ORT's own first-step allocations and kernel code pages, a pattern block the replay
under-predicts), so a plan accepted at the tightest budget can measure over it. ``--verify`` closes the loop: the
written graph is trained for a few steps in a child process under the budget's own settings (what `onnxcomp
measure` reports: ``growth_bytes`` under ORT's defaults for ``--budget-for ort-defaults``, ``peak_bytes`` under
onnxcomp's settings for the step peak); while it measures over the budget, the plan is made again for an internal
budget lowered by the miss (the model's error is mostly additive: bytes it does not see), at most ``MAX_TRIES``
times. No plan measured within the budget: ``BudgetError`` (exit 2), one line naming the lowest measured figure;
at the command line each plan is measured before it is published (``transform(accept=...)``), so a plan over the
budget is never left at the output path.

``verify_budget`` holds the loop and takes the two steps as functions, so a test can drive it without ORT.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .auto import MiB, BudgetError

MAX_TRIES = 4
# Lowered beyond the measured miss by this share of the budget at each retry: run-to-run noise of the measured
# growth is ~0.1-0.2 MiB on the suite (docs/notes/budgetguard.md), and a retry costs a whole plan.
EXTRA_SHARE = 0.01


@dataclass
class Attempt:
    internal_budget: int
    measured: int | None          # None: no plan for this internal budget
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"internal_budget_bytes": self.internal_budget, "measured_bytes": self.measured,
                **({"error": self.error} if self.error else {})}


@dataclass
class VerifyOutcome:
    budget: int
    figure: str                    # "growth_bytes" or "peak_bytes"
    attempts: list[Attempt] = field(default_factory=list)
    result: Any = None             # what ``write`` returned for the attempt that fits (or the last one written)

    @property
    def fits(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].measured is not None \
            and self.attempts[-1].measured <= self.budget

    def to_dict(self) -> dict[str, Any]:
        return {"budget_bytes": self.budget, "figure": self.figure, "fits": self.fits,
                "measured_bytes": self.attempts[-1].measured if self.attempts else None,
                "attempts": [a.to_dict() for a in self.attempts]}


def next_internal_budget(internal: int, measured: int, budget: int) -> int:
    """The internal budget of the next plan: lowered by the measured miss plus ``EXTRA_SHARE`` of the budget
    (always strictly lower than ``internal``)."""
    return min(internal - 1, internal - (measured - budget) - int(EXTRA_SHARE * budget))


def verify_budget(budget: int, write: Callable[[int], Any], measure: Callable[[Any], int], *,
                  figure: str = "growth_bytes", max_tries: int = MAX_TRIES,
                  say: Callable[[str], None] | None = None) -> VerifyOutcome:
    """Plan and write for ``budget``, measure what was written, and plan again for a lower internal budget while
    the measurement exceeds ``budget``. ``write(internal_budget)`` plans and writes (raising ``BudgetError`` when
    the planner cannot meet that budget) and returns its result; ``measure(result)`` returns the measured bytes.
    Raises ``BudgetError`` (one line) when no attempt measured within the budget."""
    say = say or (lambda _m: None)
    out = VerifyOutcome(budget, figure)
    internal = budget
    for _ in range(max(1, max_tries)):
        try:
            result = write(internal)
        except BudgetError as exc:
            out.attempts.append(Attempt(internal, None, str(exc).splitlines()[0][:300]))
            break
        got = int(measure(result))
        out.attempts.append(Attempt(internal, got))
        out.result = result
        say(f"verify: plan for internal budget {internal / MiB:.2f} MiB measured {got / MiB:.2f} MiB "
            f"({figure}) against the budget {budget / MiB:.2f} MiB")
        if got <= budget:
            return out
        internal = next_internal_budget(internal, got, budget)
        if internal <= 0:
            break
    measured = [a for a in out.attempts if a.measured is not None]
    if not measured:
        raise BudgetError(f"--verify: no plan could be written for the budget {budget / MiB:.2f} MiB "
                          f"({out.attempts[0].error if out.attempts else 'no attempt'})")
    best = min(measured, key=lambda a: a.measured)
    last = measured[-1]
    why = f"; the next, at {out.attempts[-1].internal_budget / MiB:.2f} MiB: {out.attempts[-1].error}" \
        if out.attempts[-1].measured is None else ""
    raise BudgetError(
        f"--verify: no plan measured within the budget {budget / MiB:.2f} MiB ({figure}) in {len(measured)} "
        f"measured plan(s){why}; the lowest measured is {best.measured / MiB:.2f} MiB (internal budget "
        f"{best.internal_budget / MiB:.2f} MiB), the last {last.measured / MiB:.2f} MiB: raise the budget to at "
        f"least {best.measured / MiB:.2f} MiB", predicted_peak=best.measured, target=budget)
