"""Predicted speedup of a drafter at a tree budget, and the budget that maximises it.

A step of a drafter at budget b costs t_verify(b) (from a `VerifyProfile`) + t_draft(b) (the drafter's
own propose cost, measured by replay) + the loop's per-step overhead, and emits tau(b) tokens (replayed).
Plain decoding emits one token per t_verify(1) + overhead. So

    predicted speedup(b) = tau(b) * (t_verify(1) + overhead) / (t_verify(b) + t_draft(b) + overhead).

(The overhead appears on both sides: plain decoding runs through the same loop; given the drafter's own,
``drafter_overhead_ms``, the drafter's side uses it: a tree's acceptance walk and KV commit cost more than a
one-node step's.) A turn's wall time also holds its prefill, the same for every drafter; with ``prefill_share``
p, the prefill's cost over plain decoding's decode time of a turn, the wall-time speedup is (1 + p) / (p +
1 / step speedup), which is what a run measures (`metrics.wall_speedup`). Given ``verify1_ms``,
the one-node cost measured in the process that will run, t_verify(b) = verify1_ms * t(b) / t(1): the
profile supplies the shape of the cost curve and the run its scale. On a flat, GPU-like
profile the best budget is the largest whose extra tau still pays for its draft cost; on a steep CPU
profile it is small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from specbench.harness.autobudget.profile import VerifyProfile, tree_of_size
from specbench.metrics import ratio_standard_error, wall_speedup


@dataclass(frozen=True)
class BudgetPoint:
    """What replay measured for one drafter at one budget.

    ``trees`` counts the steps by (tree size, deepest depth) the drafter actually proposed, so the verify
    cost is that of its real trees: a drafter may propose fewer nodes than the budget, and a chain costs
    less than a bushy tree of the same size on some machines. Without it the budget is the size.
    ``by_question`` holds the same per calibration question ({tokens, steps, draft_ms, trees}), for the
    prediction's sampling noise over the questions (`predicted_relative_se`); the manifest leaves it out."""

    budget: int
    tau: float
    draft_ms: float  # per step, the drafter's own propose cost
    trees: dict[str, int] = field(default_factory=dict)  # "nodes:depth" -> steps
    tau_se: float | None = None  # tau's standard error over the calibration questions (None: not measured)
    by_question: list[dict] = field(default_factory=list)  # per question: tokens, steps, draft_ms, trees


@lru_cache(maxsize=None)
def _depths(n: int) -> tuple[int, int]:
    """(bushy, chain) deepest depth of the profile's two tree shapes of ``n`` nodes."""
    return tree_of_size(n, "bushy").max_depth(), n - 1


def tree_ratio(profile: VerifyProfile, nodes: int, depth: int) -> float:
    """t_verify / t_verify(1) for a tree of ``nodes`` and deepest ``depth``: between the profile's bushy
    and chain costs by where ``depth`` lies between their depths (the mean over shapes if either is
    missing)."""
    if not {"bushy", "chain"} <= set(profile.ms) or nodes < 3:
        return profile.relative(nodes)
    bushy, chain = _depths(nodes)
    weight = min(max((depth - bushy) / (chain - bushy), 0.0), 1.0) if chain > bushy else 0.5
    return weight * profile.relative(nodes, "chain") + (1 - weight) * profile.relative(nodes, "bushy")


def verify_ratio(point: BudgetPoint, profile: VerifyProfile) -> float:
    """Mean t_verify / t_verify(1) over the point's steps (its budget when it has no tree counts). At a batch
    profile's B > 1 rows a step pads every row's tree to the bucket of the largest (`padded_ratio`)."""
    if not point.trees:
        return profile.relative(point.budget)
    trees = {tuple(map(int, key.split(":"))): count for key, count in point.trees.items()}  # (nodes, depth) -> steps
    if profile.batch > 1:
        return padded_ratio(trees, profile)
    total = sum(trees.values())
    return sum(count * tree_ratio(profile, *shape) for shape, count in trees.items()) / total


def padded_ratio(trees: dict[tuple[int, int], int], profile: VerifyProfile) -> float:
    """Expected t_verify / t_verify(1) of a step of B = ``profile.batch`` rows whose trees are drawn independently
    from ``trees`` ((nodes, depth) -> steps): the step costs the largest tree's, so P(largest = n) = F(n)^B -
    F(n-1)^B with F the share of trees of at most n nodes; a tree of n nodes is taken at the mean depth of those
    replayed. A drafter whose tree size varies (ngram: 1 node where nothing matches) pays more per row than
    its mean tree suggests; one that always proposes its budget pays the same."""
    total = sum(trees.values())
    counts: dict[int, int] = {}  # nodes -> steps
    depths: dict[int, int] = {}  # nodes -> sum of their depths
    for (nodes, depth), count in trees.items():
        counts[nodes] = counts.get(nodes, 0) + count
        depths[nodes] = depths.get(nodes, 0) + depth * count
    expected, below = 0.0, 0.0  # below: F of the previous size
    for nodes in sorted(counts):
        share = below + counts[nodes] / total  # F(nodes)
        expected += (share ** profile.batch - below ** profile.batch) * tree_ratio(
            profile, nodes, round(depths[nodes] / counts[nodes]))
        below = share
    return expected


def step_speedup(point: BudgetPoint, profile: VerifyProfile, overhead_ms: float = 0.0,
                 verify1_ms: float | None = None, drafter_overhead_ms: float | None = None) -> float:
    """Predicted speedup of decoding steps alone: tau (v1 + o) / (v1 r(b) + d(b) + o'), o' the drafter's own
    per-step overhead where measured, else the plain loop's o."""
    one = profile.cost_ms(1) if verify1_ms is None else verify1_ms
    verify = one * verify_ratio(point, profile)
    own = overhead_ms if drafter_overhead_ms is None else drafter_overhead_ms
    return point.tau * (one + overhead_ms) / (verify + point.draft_ms + own)


def predicted_speedup(point: BudgetPoint, profile: VerifyProfile, overhead_ms: float = 0.0,
                      verify1_ms: float | None = None, drafter_overhead_ms: float | None = None,
                      prefill_share: float = 0.0) -> float:
    """The wall-time speedup predicted at ``point`` (the module docstring's formula)."""
    return wall_speedup(step_speedup(point, profile, overhead_ms, verify1_ms, drafter_overhead_ms), prefill_share)


def predicted_relative_se(point: BudgetPoint, profile: VerifyProfile, overhead_ms: float = 0.0,
                          verify1_ms: float | None = None, drafter_overhead_ms: float | None = None,
                          prefill_share: float = 0.0) -> float | None:
    """The relative standard error of the prediction at ``point`` from which questions the calibration set holds
    (None without at least two questions' records). Per question q the prediction's own terms give its tokens
    and a predicted decode time C_q = steps_q (v1 r_q + d_q + o'), r_q the verify ratio of q's trees and d_q its
    draft ms per step; the step speedup is (v1 + o) sum tokens / sum C, a ratio of sums over questions, whose
    relative SE is `metrics.ratio_standard_error` over its value. So a question whose trees accept more but also
    cost more (ngram's: a match proposes a tree, no match the root alone) counts as both. The wall-time speedup
    (1 + p) / (p + 1 / S) moves by d ln W / d ln S = 1 / (1 + p S) of it. The terms themselves (v1, o, c, the
    profile) are timed, not sampled over questions: their error is not in it."""
    if len(point.by_question) < 2:
        return None
    one = profile.cost_ms(1) if verify1_ms is None else verify1_ms
    own = overhead_ms if drafter_overhead_ms is None else drafter_overhead_ms
    tokens = [question["tokens"] for question in point.by_question]  # [Q]
    costs = [question["steps"] * (one * verify_ratio(BudgetPoint(point.budget, 0.0, 0.0, question["trees"]), profile)
                                  + question["draft_ms"] + own) for question in point.by_question]  # [Q] ms
    if sum(costs) <= 0:
        return None
    relative = ratio_standard_error(tokens, costs) / (sum(tokens) / sum(costs))
    step = step_speedup(point, profile, overhead_ms, verify1_ms, drafter_overhead_ms)
    return relative / (1 + prefill_share * step)


#: predictions within this fraction of the best count as ties; the smallest budget among them wins
#: (a cheaper tree for no measurable gain, and a choice that does not flip between equal budgets)
TIE_TOLERANCE = 0.005


def best_budget(points: list[BudgetPoint], profile: VerifyProfile, overhead_ms: float = 0.0,
                verify1_ms: float | None = None, drafter_overhead_ms: float | None = None,
                prefill_share: float = 0.0) -> tuple[int, dict[int, float]]:
    """(the budget of highest predicted speedup, the prediction for each budget); budgets within
    `TIE_TOLERANCE` of the best tie, and ties go to the smallest budget."""
    predictions = {p.budget: predicted_speedup(p, profile, overhead_ms, verify1_ms, drafter_overhead_ms, prefill_share)
                   for p in points}
    return best_of(predictions), predictions


def best_of(predictions: dict[int, float]) -> int:
    """The budget of highest prediction in ``predictions`` (budget -> predicted speedup); budgets within
    `TIE_TOLERANCE` of the best tie, and ties go to the smallest budget."""
    if not predictions:
        raise ValueError("no budgets to choose from")
    top = max(predictions.values())
    return min(b for b, v in predictions.items() if v >= top * (1 - TIE_TOLERANCE))
