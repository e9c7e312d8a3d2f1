"""Write specbench/data/calibration/question.jsonl: the conversations `--tree-budget auto` calibrates on.

Each is a held-out ShareGPT conversation with two human turns, both kept, so that calibration decodes what
a benchmark run decodes: a first answer, then a second turn whose prompt carries the target's own first
answer (MT-bench's shape; its second-turn contexts are longer and further from the training prompts).
They are the first 16 conversations, in the order of the distillation's seeded shuffle (seed 0), whose
first turn is among the first 128 held-out prompts and whose two turns are each at most 800 characters.
None is a benchmark question, and no shipped drafter was trained on any of them: `specbench distill`
takes its training prompts after the first 2 x --heldout of the same shuffle, and only first turns.
Rerun to regenerate; the output is deterministic.

Usage: python scripts/make_calibration_set.py
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.drafters.training.sharegpt import conversations_by_first_turn, load_prompts

COUNT, TURNS, MAX_CHARS, HELDOUT = 16, 2, 800, 128
OUT = Path(__file__).resolve().parents[1] / "specbench" / "data" / "calibration" / "question.jsonl"


def main() -> None:
    split = load_prompts(train=None, heldout=HELDOUT, seed=0)
    trained = set(split.train)
    conversations = conversations_by_first_turn()
    chosen = []
    for first in split.heldout:
        turns = conversations[first][:TURNS]
        if len(turns) == TURNS and all(len(t) <= MAX_CHARS for t in turns) and not trained & set(turns):
            chosen.append(turns)
    chosen = chosen[:COUNT]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as handle:
        for number, turns in enumerate(chosen, start=1):
            handle.write(json.dumps({"question_id": f"calibration-{number:02d}", "category": "sharegpt",
                                     "turns": turns}, ensure_ascii=False) + "\n")
    print(f"wrote {len(chosen)} two-turn conversations to {OUT}")


if __name__ == "__main__":
    main()
