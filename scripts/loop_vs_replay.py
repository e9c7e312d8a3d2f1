"""Check `auto`'s cost model against the loop: a drafter's draft ms in a real run against replay of the
same turns, and its in-loop verify cost per tree size against the verify-cost profile's.

For each question turn (MT-bench, one question from each of the first categories), interleaved: plain
decoding (vanilla, the 1-node verify), the drafter through the loop at ``--budget``, and the drafter
replayed against the turn's trajectory. Greedy, so the run and the replay make the same steps.

Usage: python scripts/loop_vs_replay.py --drafters hydra,ctc-ce --budget 4 [--categories 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

import torch

from specbench.harness.budgets import create_entry
from specbench.harness.loop import generate
from specbench.model import cache_root, load_target
from specbench.profile import cached_profile
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions, resolve_bench, select_questions
from specbench.replay import question_trajectories, replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafters", default="hydra,ctc-ce")
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--categories", type=int, default=4, help="first N MT-bench categories, one question each")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target("default")
    prompts = PromptBuilder(target.tokenizer, None)
    questions = select_questions(load_questions(resolve_bench("mt_bench")), None, 1)
    categories = list(dict.fromkeys(q.category for q in questions))[: args.categories]
    turns = [t for q in questions if q.category in categories
             for t in question_trajectories(target, prompts, q, args.max_new_tokens)]
    names = args.drafters.split(",")
    drafters = {name: create_entry(name, {}) for name in ["vanilla", *names]}
    real_verify: dict[tuple[str, int], list[float]] = defaultdict(list)
    draft: dict[tuple[str, str], list[float]] = defaultdict(list)
    for trajectory in turns:
        for name, drafter in drafters.items():
            budget = 1 if name == "vanilla" else args.budget
            run = generate(target, drafter, trajectory.prompt.tolist(), args.max_new_tokens, budget, breakdown=True)
            for step in run.steps:
                real_verify[(name, step.nodes)].append(step.stage_ms["verify"])
            if name != "vanilla":
                replayed = replay(target, drafter, trajectory, args.max_new_tokens, budget)
                draft[(name, "run")] += [step.draft_ms for step in run.steps]
                draft[(name, "replay")] += [step.draft_ms for step in replayed.steps]
    one = statistics.median(real_verify[("vanilla", 1)])
    profile = cached_profile(target, cache_root())
    print(f"{len(turns)} turns; vanilla 1-node verify in the loop: median {one:.1f} ms")
    print("| drafter | draft ms, run | draft ms, replay | run / replay |")
    print("| --- | ---: | ---: | ---: |")
    for name in names:
        run_ms, replay_ms = statistics.fmean(draft[(name, "run")]), statistics.fmean(draft[(name, "replay")])
        print(f"| {name} | {run_ms:.2f} | {replay_ms:.2f} | {run_ms / replay_ms:.2f} |")
    print("\n| drafter | tree nodes | steps | in-loop verify / 1 node | profile (mean of shapes) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (name, nodes), times in sorted(real_verify.items()):
        if name != "vanilla" and len(times) >= 20:
            expected = f"{profile.relative(nodes):.2f}" if profile else "no cached profile"
            print(f"| {name} | {nodes} | {len(times)} | {statistics.median(times) / one:.2f} | {expected} |")


if __name__ == "__main__":
    main()
