"""How a verify-cost profile's shape (n-node forward over one-node forward) moves with the cached prefix's length.

`auto` prices a tree of n nodes as the profile's ratio r(n) = cost(n) / cost(1), timed against one 300-token prefix
(`measure_profile`), times v1 timed through the loop. The loop's context grows over a turn (prompt, then up to 128
new tokens), so r(n) would err where it depends on the prefix. This times whole profiles at several prefixes,
interleaved (each round visits every prefix once, the order rotating), and prints the median over rounds of the
1-node milliseconds and of r(n) (the mean of the chain and bushy shapes), with the context lengths the README's
main job saw (its questions' prompts, then prompt + 128 new tokens, from a run's stored answers). Time it alone.

Run:  python -m benchmarks.profile_by_prefix [--prefixes 64,150,300,600,1000] [--rounds 3]
          [--answers docs/runs/main-job-xeon-amx-e5c0baf/answers/vanilla.jsonl.gz]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

import torch

from specbench.harness.autobudget.profile import measure_profile
from specbench.model import load_target
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions, resolve_bench

SIZES = [1, 2, 4, 8, 16, 32, 64]


def context_lengths(target, answers: Path) -> list[int]:
    """Prompt lengths (tokens) of every turn of the run whose answers are in ``answers`` (JSONL, gzip or not):
    turn k's prompt holds the questions' turns 1..k and the run's answers 1..k-1, as the loop builds it."""
    questions = {q.question_id: q for q in load_questions(resolve_bench("demo"))}
    opener = gzip.open if answers.suffix == ".gz" else open
    builder = PromptBuilder(target.tokenizer)
    lengths = []
    with opener(answers, "rt") as lines:
        for line in lines:
            record = json.loads(line)
            turns = questions[record["question_id"]].turns
            said = record["choices"][0]["turns"]
            lengths += [len(builder.build(turns[: k + 1], said[:k])) for k in range(len(said))]
    return lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefixes", default="64,150,300,600,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--answers", type=Path,
                        default=Path("docs/runs/main-job-xeon-amx-e5c0baf/answers/vanilla.jsonl.gz"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target()
    if args.answers.exists():
        lengths = sorted(context_lengths(target, args.answers))
        quartiles = statistics.quantiles(lengths, n=4)
        print(f"prompt tokens over {len(lengths)} turns: min {lengths[0]}, quartiles "
              f"{' / '.join(f'{q:.0f}' for q in quartiles)}, max {lengths[-1]} (a turn then adds up to 128)")
    prefixes = [int(p) for p in args.prefixes.split(",")]
    one_node: dict[int, list[float]] = {p: [] for p in prefixes}
    ratios: dict[int, list[list[float]]] = {p: [] for p in prefixes}  # per round: r(n) for n in SIZES
    for round_ in range(args.rounds):
        shift = round_ % len(prefixes)
        for prefix in prefixes[shift:] + prefixes[:shift]:
            profile = measure_profile(target, sizes=SIZES, prefix=prefix, repeats=args.repeats)
            rows = list(profile.ms.values())  # [shape][size index] ms
            mean_ms = [statistics.mean(row[i] for row in rows) for i in range(len(SIZES))]
            one_node[prefix].append(mean_ms[0])
            ratios[prefix].append([ms / mean_ms[0] for ms in mean_ms])
    print(f"\nmedian over {args.rounds} interleaved rounds ({args.repeats} repeats each; ratio = n nodes / 1 node, "
          "mean of chain and bushy)\n")
    print("| prefix | 1 node ms | " + " | ".join(f"r({n})" for n in SIZES[1:]) + " |")
    print("| ---: | ---: | " + " | ".join("---:" for _ in SIZES[1:]) + " |")
    for prefix in prefixes:
        cells = [statistics.median(r[i] for r in ratios[prefix]) for i in range(1, len(SIZES))]
        print(f"| {prefix} | {statistics.median(one_node[prefix]):.1f} | " + " | ".join(f"{c:.3f}" for c in cells)
              + " |")


if __name__ == "__main__":
    main()
