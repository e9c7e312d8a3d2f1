"""Sweep a drafter's options and the tree budget, side by side with vanilla, in one process.

Every setting runs on the same prompts (first turns of the first questions of each category),
interleaved per prompt with vanilla, so the speedups are ratios measured under the same machine load.
Output ids are checked against vanilla's for every setting.

Run:  python benchmarks/sweep.py --drafter ngram --tree-budget 4,8,16 \
          --option max_depth=3,6,10 --option max_candidates=1,3 --bench mt_bench --limit 1
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import sys
from pathlib import Path

import torch

from specbench.harness.loop import generate
from specbench.model import load_target
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions, resolve_bench, select_questions
from specbench.registry import create_drafter


def parse_options(pairs: list[str]) -> list[dict]:
    """``["a=1,2", "b=x"]`` -> the cartesian product of settings."""
    axes = []
    for pair in pairs:
        key, _, values = pair.partition("=")
        axes.append([(key, ast.literal_eval(v) if v.strip()[:1].isdigit() else v) for v in values.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", required=True)
    parser.add_argument("--option", action="append", default=[], help="NAME=V1,V2,... (repeatable)")
    parser.add_argument("--tree-budget", default="16", help="comma-separated budgets")
    parser.add_argument("--model", default="default")
    parser.add_argument("--bench", default="demo")
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target = load_target(args.model)
    builder = PromptBuilder(target.tokenizer)
    questions = select_questions(load_questions(resolve_bench(args.bench)), None, args.limit)
    prompts = [builder.build(q.turns[:1], []) for q in questions]
    settings = [(budget, options) for budget in map(int, args.tree_budget.split(",")) for options in parse_options(args.option)]
    totals = {i: {"seconds": 0.0, "tokens": 0, "steps": 0, "accepted": 0, "equal": True} for i in range(len(settings))}
    base = {"seconds": 0.0, "tokens": 0}
    generate(target, create_drafter("vanilla"), prompts[0], 16, 1)  # warm-up
    for p, ids in enumerate(prompts):
        reference = generate(target, create_drafter("vanilla"), ids, args.max_new_tokens, 1)
        base["seconds"] += reference.wall_s
        base["tokens"] += reference.new_tokens
        for i, (budget, options) in enumerate(settings):
            result = generate(target, create_drafter(args.drafter, **options), ids, args.max_new_tokens, budget)
            row = totals[i]
            row["seconds"] += result.wall_s
            row["tokens"] += result.new_tokens
            row["steps"] += len(result.steps)
            row["accepted"] += sum(result.accept_lengths)
            row["equal"] &= result.output_ids == reference.output_ids
        print(f"prompt {p + 1}/{len(prompts)} done", file=sys.stderr)
    base_rate = base["seconds"] / base["tokens"]
    table = []
    for i, (budget, options) in enumerate(settings):
        row = totals[i]
        table.append({"tree_budget": budget, **options, "tau": row["accepted"] / max(row["steps"], 1),
                      "speedup": base_rate / (row["seconds"] / row["tokens"]), "equal_to_vanilla": row["equal"],
                      "ms_per_step": 1000 * row["seconds"] / max(row["steps"], 1)})
    print(f"{args.drafter} on {len(prompts)} prompts, {args.max_new_tokens} new tokens, vanilla "
          f"{base['tokens'] / base['seconds']:.2f} tok/s")
    keys = list(table[0])
    print(" | ".join(keys))
    for row in table:
        print(" | ".join(f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in keys))
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
