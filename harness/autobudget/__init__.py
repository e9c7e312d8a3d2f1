"""The tree-budget pipeline beside the loop it drives: which budget each drafter runs at.

One entry point, `resolve_budgets` (a run's `BudgetChoice` per drafter). Its floors, bottom up:
`profile` (verify cost by tree size on this machine), `trajectories` (greedy trajectories, cached),
`replay` (a drafter against a trajectory, without the target), `calibration` (the question set `auto`
replays over), `predict` (speedup from tau, draft cost and the profile), `spec` (the ``--tree-budget``
spec and ``NAME@N`` entries) and `choose` (the pipeline itself).
"""

from __future__ import annotations

from typing import Any

__all__ = ["resolve_budgets"]


def __getattr__(name: str) -> Any:
    """`resolve_budgets`, imported on first use: the pipeline loads torch, and the command line reads the
    light floors (`spec`, `calibration`) before any model is needed."""
    if name != "resolve_budgets":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from specbench.harness.autobudget.choose import resolve_budgets

    return resolve_budgets
