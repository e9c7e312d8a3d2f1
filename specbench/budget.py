"""Predicted speedup of a drafter at a tree budget, and the budget that maximises it.

A step of a drafter at budget b costs t_verify(b) (from a `VerifyProfile`) + t_draft(b) (the drafter's
own propose cost, measured by replay) + the loop's per-step overhead, and emits tau(b) tokens (replayed).
Plain decoding emits one token per t_verify(1) + overhead. So

    predicted speedup(b) = tau(b) * (t_verify(1) + overhead) / (t_verify(b) + t_draft(b) + overhead).

(The overhead appears on both sides: plain decoding runs through the same loop.) On a flat, GPU-like
profile the best budget is the largest whose extra tau still pays for its draft cost; on a steep CPU
profile it is small.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbench.profile import VerifyProfile


@dataclass(frozen=True)
class BudgetPoint:
    """What replay measured for one drafter at one budget."""

    budget: int
    tau: float
    draft_ms: float  # per step, the drafter's own propose cost


def predicted_speedup(point: BudgetPoint, profile: VerifyProfile, overhead_ms: float = 0.0) -> float:
    vanilla_step = profile.cost_ms(1) + overhead_ms
    return point.tau * vanilla_step / (profile.cost_ms(point.budget) + point.draft_ms + overhead_ms)


def best_budget(points: list[BudgetPoint], profile: VerifyProfile, overhead_ms: float = 0.0) -> tuple[int, dict[int, float]]:
    """(the budget of highest predicted speedup, the prediction for each budget); ties go to the
    smaller budget (the cheaper tree)."""
    if not points:
        raise ValueError("no budgets to choose from")
    predictions = {p.budget: predicted_speedup(p, profile, overhead_ms) for p in points}
    best = max(sorted(predictions), key=lambda b: (round(predictions[b], 9), -b))
    return best, predictions
