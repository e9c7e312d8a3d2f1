"""Are a head drafter's dynamic-tree scores calibrated, and does calibrating them raise tau?

The dynamic tree (drafters/dynamic_tree.py) ranks candidates by the sum of the heads' log-probabilities
along their path, i.e. it treats a head's probability as the chance that its token is accepted given
that its parent was. This script measures that chance on one question set (``--fit``: the shipped
ShareGPT calibration set, or the benchmark questions a ``--limit`` run leaves out): every candidate whose
parent lies on the target's greedy path is labelled accepted or not from the known continuation. It
prints, per depth, draft probability against acceptance rate, fits a monotone map per depth (isotonic,
interpolated between pooled blocks), and replays the benchmark (``--bench``, ``--limit``) at each budget
with the tree built from the raw and from the calibrated scores. Greedy replay is exact, so tau is the
tau a timed run would measure.

Usage: python scripts/calibrate_tree_scores.py [--drafter hydra] [--fit shipped|heldout] [--budgets 8,16]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

import specbench.drafters.medusa as heads_module
from specbench.calibration import CALIBRATION_TOKENS, default_calibration_file, heldout_questions
from specbench.harness.budgets import create_entry
from specbench.model import cache_root, load_target
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions, resolve_bench, select_questions
from specbench.replay import TrajectoryTarget, sweep
from specbench.trajectory_cache import replay_trajectories

RawCandidates = heads_module.Candidates


class RecordingCandidates(RawCandidates):
    """Candidates that leave themselves where the labelling hook finds them."""

    last: "RecordingCandidates | None" = None

    def __init__(self) -> None:
        super().__init__()
        RecordingCandidates.last = self


def label_candidates(ids: list[int], past: int, candidates: RawCandidates) -> list[tuple[int, float, bool]]:
    """(depth, the head's own log-probability, accepted) for every candidate whose parent is the root or
    on the greedy path; ``ids`` is the trajectory, ``past`` the root's position."""
    on: list[bool] = []
    rows = []
    for token, parent, depth, score in zip(candidates.tokens, candidates.parents, candidates.depths, candidates.scores):
        parent_on = parent < 0 or on[parent]
        position = past + depth
        hit = parent_on and position < len(ids) and ids[position] == token
        on.append(hit)
        if parent_on and position < len(ids):
            rows.append((depth, score - (0.0 if parent < 0 else candidates.scores[parent]), hit))
    return rows


def record_labels(target, drafter, turns, budget: int, tokens: int) -> list[tuple[int, float, bool]]:
    """Replay ``turns`` at ``budget`` and label every step's candidates (before the tree is verified)."""
    rows: list[tuple[int, float, bool]] = []
    forward_tree = TrajectoryTarget.forward_tree

    def labelling(self, tree, cache):
        if RecordingCandidates.last is not None:
            rows.extend(label_candidates(self._ids, self._past, RecordingCandidates.last))
            RecordingCandidates.last = None
        return forward_tree(self, tree, cache)

    heads_module.Candidates, TrajectoryTarget.forward_tree = RecordingCandidates, labelling
    try:
        sweep(target, {"fit": drafter}, turns, [budget], tokens)
    finally:
        heads_module.Candidates, TrajectoryTarget.forward_tree = RawCandidates, forward_tree
    return rows


def isotonic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pool adjacent violators: (block mean x, block mean y), y non-decreasing in x."""
    order = np.argsort(x)
    blocks: list[list[float]] = []  # [sum x, sum y, count]
    for xi, yi in zip(x[order], y[order]):
        blocks.append([xi, yi, 1.0])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            sx, sy, n = blocks.pop()
            blocks[-1][0] += sx
            blocks[-1][1] += sy
            blocks[-1][2] += n
    return np.array([b[0] / b[2] for b in blocks]), np.array([b[1] / b[2] for b in blocks])


def by_depth(rows: list[tuple[int, float, bool]]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per depth: (draft probabilities [n], accepted as 0/1 [n])."""
    return {depth: (np.array([math.exp(s) for d, s, _ in rows if d == depth]),
                    np.array([float(h) for d, _, h in rows if d == depth])) for depth in sorted({d for d, _, _ in rows})}


class ScoreMap:
    """Per depth, draft probability -> acceptance rate (monotone, interpolated); deeper depths use the deepest fitted."""

    def __init__(self, rows: list[tuple[int, float, bool]], floor: float = 1e-4) -> None:
        self.fits = {depth: isotonic(p, hit) for depth, (p, hit) in by_depth(rows).items()}
        self.floor = floor

    def log_rate(self, depth: int, log_prob: float) -> float:
        xs, ys = self.fits[min(depth, max(self.fits))]
        return math.log(max(float(np.interp(math.exp(log_prob), xs, ys)), self.floor))


def calibrated_candidates(score_map: ScoreMap) -> type:
    class CalibratedCandidates(RawCandidates):
        """Candidates scored by the calibrated log acceptance rate along their path."""

        def add(self, tokens: torch.Tensor, scores: torch.Tensor, parents: list[int]) -> list[int]:
            added = super().add(tokens, scores, parents)
            for i in added:  # the parent's score is already mapped; map this step's own log-probability
                above = 0.0 if self.parents[i] < 0 else self.scores[self.parents[i]]
                self.scores[i] = above + score_map.log_rate(self.depths[i], self.scores[i] - above)
            return added

    return CalibratedCandidates


def reliability(rows: list[tuple[int, float, bool]], edges=(0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.01)) -> None:
    """Per depth and probability bin: candidates, mean draft probability, acceptance rate."""
    print("| depth | p bin | candidates | mean p | accepted |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for depth, (p, hit) in by_depth(rows).items():
        for low, high in zip(edges, edges[1:]):
            inside = (p >= low) & (p < high)
            if inside.any():
                print(f"| {depth} | {low:.2f}-{min(high, 1):.2f} | {inside.sum()} | {p[inside].mean():.3f} | "
                      f"{hit[inside].mean():.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="hydra")
    parser.add_argument("--model", default="default")
    parser.add_argument("--fit", choices=("shipped", "heldout"), default="shipped")
    parser.add_argument("--fit-budget", type=int, default=32, help="budget of the labelling replay")
    parser.add_argument("--bench", default="mt_bench")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--budgets", default="8,16")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model, "cpu", "float32")
    prompts = PromptBuilder(target.tokenizer, None)
    fit_questions = load_questions(default_calibration_file()) if args.fit == "shipped" \
        else heldout_questions(args.bench, None, args.limit)
    tokens = min(args.max_new_tokens, CALIBRATION_TOKENS)

    def turns(questions, max_new_tokens: int) -> list:
        """(category, trajectory) per turn, recorded once and cached as `specbench replay` does."""
        recorded, _ = replay_trajectories(target, prompts, questions, max_new_tokens, None, cache_root())
        return [(q.category, t) for q, per_turn in zip(questions, recorded) for t in per_turn]

    fit_turns = turns(fit_questions, tokens)
    bench_turns = turns(select_questions(load_questions(resolve_bench(args.bench)), None, args.limit), args.max_new_tokens)

    drafter = create_entry(args.drafter, {})
    rows = record_labels(target, drafter, fit_turns, args.fit_budget, tokens)
    print(f"{args.drafter}: {len(rows)} labelled candidates from {len(fit_turns)} {args.fit} turns "
          f"(replayed at budget {args.fit_budget})\n")
    reliability(rows)
    score_map = ScoreMap(rows)

    budgets = [int(b) for b in args.budgets.split(",")]
    print(f"\n{args.bench} limit {args.limit} ({len(bench_turns)} turns): tau by budget, raw against calibrated scores")
    print("| budget | raw tau | calibrated tau | raw draft ms | calibrated draft ms |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    raw = sweep(target, {"raw": drafter}, bench_turns, budgets, args.max_new_tokens)
    heads_module.Candidates = calibrated_candidates(score_map)
    try:
        calibrated = sweep(target, {"calibrated": drafter}, bench_turns, budgets, args.max_new_tokens)
    finally:
        heads_module.Candidates = RawCandidates
    for budget in budgets:
        r = raw[(raw.category == "overall") & (raw.budget == budget)].iloc[0]
        c = calibrated[(calibrated.category == "overall") & (calibrated.budget == budget)].iloc[0]
        print(f"| {budget} | {r.tau:.3f} | {c.tau:.3f} | {r.draft_ms:.1f} | {c.draft_ms:.1f} |")


if __name__ == "__main__":
    main()
