"""Write specbench/data/calibration/question.jsonl: the prompts `--tree-budget auto` calibrates on.

They are the first 16 of the distillation's held-out ShareGPT prompts (seed 0) that are at most 800
characters long: none is a benchmark question, and no shipped drafter was trained on any of them
(`specbench distill` takes its training prompts after the first 2 x --heldout of the same shuffle).
Rerun to regenerate; the output is deterministic.

Usage: python scripts/make_calibration_set.py
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.drafters.training.sharegpt import load_prompts

COUNT, MAX_CHARS = 16, 800
OUT = Path(__file__).resolve().parents[1] / "specbench" / "data" / "calibration" / "question.jsonl"


def main() -> None:
    heldout = load_prompts(train=0, heldout=128, seed=0).heldout
    chosen = [text for text in heldout if len(text) <= MAX_CHARS][:COUNT]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as handle:
        for number, text in enumerate(chosen, start=1):
            handle.write(json.dumps({"question_id": f"calibration-{number:02d}", "category": "sharegpt",
                                     "turns": [text]}, ensure_ascii=False) + "\n")
    print(f"wrote {len(chosen)} prompts to {OUT}")


if __name__ == "__main__":
    main()
