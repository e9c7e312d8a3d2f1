"""The tree-budget pipeline beside the loop it drives: which budget each drafter runs at.

One entry point, `resolve_budgets` (a run's `BudgetChoice` per drafter). Its floors, bottom up:
`profile` (verify cost by tree size on this machine), `trajectories` (greedy trajectories, cached),
`replay` (a drafter against a trajectory, without the target), `calibration` (the question set `auto`
replays over), `predict` (speedup from tau, draft cost and the profile), `spec` (the ``--tree-budget``
spec and ``NAME@N`` entries) and `choose` (the pipeline itself).
"""

from specbench.harness.autobudget.choose import resolve_budgets

__all__ = ["resolve_budgets"]
