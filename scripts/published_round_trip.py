"""The published-layout round trip on a real model: write a specbench medusa checkpoint in FasterDecoding's
medusa-1 layout (`specbench convert`), then run the original and the converted copy through `specbench run`
and compare every turn's output ids and accept lengths.

Both sides draft the same tree: the original's own tree at the budget (from its measured accuracies) is
handed to the converted copy as ``choices``. The original scores the whole vocabulary (``draft_vocab=0``)
because the published layout stores no token ranking. Timing is not compared here (only ids and
acceptance), so the CPU need not be quiet.

    python scripts/published_round_trip.py --out runs/round-trip --budget 8 --limit 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from specbench.drafters.medusa import MedusaDrafter
from specbench.model import load_target
from specbench.results import load_run


def cli(*args: str) -> None:
    print("$ specbench " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "specbench.harness.cli", *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/round-trip")
    parser.add_argument("--model", default="default")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--limit", type=int, default=1, help="MT-bench questions per category")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    out = Path(args.out)
    published = out / "medusa-published"
    cli("convert", "medusa", "--model", args.model, "--out", str(published))

    native = MedusaDrafter(draft_vocab=0)
    native.reset(load_target(args.model).handle)
    tree = out / f"tree-{args.budget}.json"
    tree.write_text(json.dumps([list(path) for path in native.static_tree(args.budget).paths[1:]]) + "\n")

    common = ["run", "--model", args.model, "--bench", "mt_bench", "--limit", str(args.limit), "--max-new-tokens",
              str(args.max_new_tokens), "--tree-budget", str(args.budget), "--threads", "2", "--no-progress", "--resume"]
    cli(*common, "--drafters", "vanilla,medusa", "--drafter-option", "medusa.draft_vocab=0", "--out", str(out / "original"))
    cli(*common, "--drafters", "medusa", "--drafter-option", f"medusa.checkpoint={published}",
        "--drafter-option", f"medusa.choices={tree}", "--out", str(out / "converted"))

    original, converted = load_run(out / "original"), load_run(out / "converted")
    vanilla = {a.question_id: a for a in original["vanilla"]}
    theirs = {a.question_id: a for a in converted["medusa"]}
    turns = same_ids = same_steps = tokens = steps = 0
    for mine in original["medusa"]:
        other = theirs[mine.question_id]
        for t in range(len(mine.turns)):
            turns += 1
            same_ids += mine.output_ids[t] == other.output_ids[t] == vanilla[mine.question_id].output_ids[t]
            same_steps += [s.accepted for s in mine.steps[t]] == [s.accepted for s in other.steps[t]]
            tokens += mine.new_tokens[t]
            steps += len(mine.steps[t])
    other_tokens = sum(sum(a.new_tokens) for a in converted["medusa"])
    other_steps = sum(len(turn) for a in converted["medusa"] for turn in a.steps)
    print(f"turns {turns}: output ids equal (original = converted = vanilla) in {same_ids}, "
          f"accept lengths equal in {same_steps}")
    print(f"tau original {tokens / steps:.4f}, converted {other_tokens / other_steps:.4f} (budget {args.budget})")


if __name__ == "__main__":
    main()
