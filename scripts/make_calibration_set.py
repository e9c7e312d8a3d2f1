"""Write the held-out ShareGPT calibration set (default: docs/journal/calibration-sharegpt-heldout.jsonl).

It was the package's calibration set until session 27 (issue 40): the drafters were trained on ShareGPT,
so their tau on it ran 9-11% above a benchmark's. The package now ships questions written for specbench
(specbench/data/calibration/question.jsonl, harness/autobudget/calibration.py); this script keeps the old
set reproducible.

Each entry is a held-out ShareGPT conversation: the first 16, in the order of the distillation's seeded
shuffle (seed 0), whose first turn is among the first 128 held-out prompts and whose first ``--turns``
human turns (default 1, the old package set) are each at most 800 characters. None is a benchmark question,
and no shipped drafter was trained on any of them: `specbench distill` takes its training prompts after
the first 2 x --heldout of the same shuffle, and first turns only. Calibration decodes every turn a file
holds, as a run does. ``--turns 2`` writes the two-turn set measured against the one-turn set in
docs/journal/performance-notes.md ("Calibrating on two turns"). Rerun to regenerate; the output is deterministic.

Usage: python scripts/make_calibration_set.py [--turns N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specbench.drafters.training.sharegpt import conversations_by_first_turn, load_prompts

COUNT, MAX_CHARS, HELDOUT = 16, 800, 128
SHAREGPT_SET = Path(__file__).resolve().parents[1] / "docs" / "journal" / "calibration-sharegpt-heldout.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1, help="human turns per conversation (default 1)")
    parser.add_argument("--out", type=Path, default=SHAREGPT_SET, help="where to write (default: %(default)s)")
    args = parser.parse_args()
    split = load_prompts(train=None, heldout=HELDOUT, seed=0)
    trained = set(split.train)
    conversations = conversations_by_first_turn()
    chosen = []
    for first in split.heldout:
        turns = conversations[first][: args.turns]
        if len(turns) == args.turns and all(len(t) <= MAX_CHARS for t in turns) and not trained & set(turns):
            chosen.append(turns)
    chosen = chosen[:COUNT]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        for number, turns in enumerate(chosen, start=1):
            handle.write(json.dumps({"question_id": f"calibration-{number:02d}", "category": "sharegpt",
                                     "turns": turns}, ensure_ascii=False) + "\n")
    print(f"wrote {len(chosen)} conversations of {args.turns} turn(s) to {args.out}")


if __name__ == "__main__":
    main()
