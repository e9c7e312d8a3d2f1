"""Budget choice from a verify-cost profile: a flat, GPU-like profile picks the largest budget that still
pays; a steep, CPU-like one a small budget; the formula is the documented one."""

from __future__ import annotations

import pytest

from specbench.harness.autobudget.predict import BudgetPoint, best_budget, predicted_speedup
from specbench.harness.autobudget.profile import VerifyProfile

SIZES = [1, 2, 4, 8, 16, 32, 64]
# tau grows by ~0.12 per doubling of the budget, as replay measured for hydra-like drafters
POINTS = [BudgetPoint(b, tau, draft_ms=2.0) for b, tau in zip(SIZES, [1.0, 1.45, 1.7, 1.85, 1.97, 2.05, 2.1])]


def profile(ms: list[float]) -> VerifyProfile:
    return VerifyProfile(key={"model": "m"}, sizes=SIZES, ms={"chain": ms})


def test_the_formula():
    flat = profile([30.0] * 7)
    assert predicted_speedup(BudgetPoint(4, 1.7, 2.0), flat, overhead_ms=1.0) == pytest.approx(1.7 * 31 / 33)


def test_a_flat_profile_chooses_a_large_budget_and_a_steep_one_a_small_budget():
    flat, _ = best_budget(POINTS, profile([30.0, 30.0, 30.2, 30.5, 31.0, 32.0, 34.0]))
    steep, predictions = best_budget(POINTS, profile([33.0, 36.2, 52.5, 64.2, 66.9, 84.8, 122.4]))
    assert flat == 32  # 64 nodes add 0.05 tau but cost 2 ms more
    assert steep == 2 and predictions[2] > 1.0 > predictions[16]


def test_a_drafter_that_never_pays_keeps_budget_one_and_ties_go_to_the_smaller():
    useless = [BudgetPoint(b, 1.0, draft_ms=1.0) for b in SIZES]
    best, predictions = best_budget(useless, profile([30.0] * 7))
    assert best == 1 and predictions[1] == pytest.approx(30 / 31)
    with pytest.raises(ValueError):
        best_budget([], profile([30.0] * 7))
