"""How far two question sets of a run's size can disagree on a drafter's tau, from a stored run's answers.

`auto` predicts a speedup from a replay over a calibration set and a run then measures tau on its own
questions: two different samples of questions. This bootstraps the run's questions (resampled with
replacement, tau over their pooled accept lengths, as `summary.csv` computes it) to give, per drafter, the
relative standard deviation of tau over a set of that many questions, and the chance that two independent
such sets differ by more than ``--gap`` (10%: issue 40's bar for measured over predicted). A drafter whose tau
varies much between questions (ngram: prompt lookup pays only where an answer repeats its context) cannot
be predicted within 10% from any 16-question calibration set, however well the step cost is modelled. It reads
only the run directory; nothing is timed.

Run:  python -m benchmarks.tau_spread docs/runs/main-job
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from specbench.metrics import tau
from specbench.reports.summary import question_table
from specbench.results import load_run

BOOTSTRAP_DRAWS = 10_000
SEED = 0


def spread(lengths_per_question: list[list[int]], gap: float, draws: int = BOOTSTRAP_DRAWS,
           seed: int = SEED) -> dict[str, float]:
    """Tau over all questions, its relative bootstrap standard deviation, and P(|tau_A / tau_B - 1| > gap) for
    two independent resamples A and B of as many questions."""
    rng = np.random.default_rng(seed)
    sums = np.array([sum(lengths) for lengths in lengths_per_question], dtype=float)  # [Q]
    steps = np.array([len(lengths) for lengths in lengths_per_question], dtype=float)  # [Q]
    picks = rng.integers(0, len(sums), size=(2, draws, len(sums)))  # [2, draws, Q] question indices
    taus = sums[picks].sum(-1) / steps[picks].sum(-1)  # [2, draws]
    whole = tau([length for lengths in lengths_per_question for length in lengths])
    return {"tau": whole, "relative_sd": float(taus[0].std() / whole),
            "p_two_sets_beyond_gap": float(np.mean(np.abs(taus[0] / taus[1] - 1) > gap))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory with its answers")
    parser.add_argument("--gap", type=float, default=0.10, help="the relative tau difference asked about")
    args = parser.parse_args(argv)
    table = question_table(load_run(args.run))
    print(f"| drafter | questions | tau | relative sd of tau | P(two sets differ > {args.gap:.0%}) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for drafter, rows in table.groupby("drafter", sort=True):
        if drafter == "vanilla":
            continue
        result = spread(list(rows["accept_lengths"]), args.gap)
        print(f"| {drafter} | {len(rows)} | {result['tau']:.3f} | {result['relative_sd']:.3f} | "
              f"{result['p_two_sets_beyond_gap']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
