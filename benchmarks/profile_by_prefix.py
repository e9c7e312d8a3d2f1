"""How a verify-cost profile's shape (n-node forward over one-node forward) moves with the cached prefix's length.

`auto` prices a tree of n nodes as the profile's ratio r(n) = cost(n) / cost(1), timed against one 300-token prefix
(`measure_profile`), times v1 timed through the loop. The loop's context grows over a turn (prompt, then up to 128
new tokens), so r(n) would err where it depends on the prefix. This times whole profiles at several prefixes,
interleaved (each round visits every prefix once, the order rotating), and prints the median over rounds of the
1-node milliseconds and of r(n) (the mean of the chain and bushy shapes), with the context lengths the README's
main job saw (its questions' prompts, then prompt + 128 new tokens, from a run's stored answers). Time it alone.

Run:  python -m benchmarks.profile_by_prefix [--prefixes 64,150,300,600,1000] [--rounds 3]
          [--run docs/runs/main-job-xeon-amx-e5c0baf]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from specbench.harness.attribution import manifest_questions
from specbench.harness.autobudget.profile import measure_profile
from specbench.model import load_target
from specbench.prompts import PromptBuilder
from specbench.results import load_run, read_manifest

SIZES = [1, 2, 4, 8, 16, 32, 64]


def context_lengths(target, run: Path) -> list[int]:
    """Prompt lengths (tokens) of every turn of vanilla's answers in the run directory ``run``, rebuilt as the loop
    built them (turn k: the questions' turns 1..k and the run's answers 1..k-1, the run's chat template)."""
    manifest = read_manifest(run) or {}
    questions = {q.question_id: q for q in manifest_questions(run, manifest)}
    builder = PromptBuilder(target.tokenizer, (manifest.get("config") or {}).get("template"))
    return [len(builder.build(questions[record.question_id].turns[: k + 1], record.turns[:k]))
            for record in load_run(run)["vanilla"] for k in range(len(record.turns))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefixes", default="64,150,300,600,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--run", type=Path, default=Path("docs/runs/main-job-xeon-amx-e5c0baf"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target()
    if args.run.is_dir():
        lengths = sorted(context_lengths(target, args.run))
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
            one_node[prefix].append(profile.cost_ms(1))  # cost_ms: the mean over the shapes
            ratios[prefix].append([profile.cost_ms(n) / profile.cost_ms(1) for n in SIZES])
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
