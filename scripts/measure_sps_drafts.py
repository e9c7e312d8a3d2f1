"""Choose sps's default self-draft by measurement: replay each candidate draft model (the int8 copy of the
target, its first N layers) over the shipped calibration set at chain depths 1-4 and print tau, the
drafter's own draft ms per step and the predicted speedup on this machine (the verify-cost profile and
the loop timing that `--tree-budget auto` uses). Replay runs no target forward, so only the draft model
is timed; run it with nothing else on the CPU.

    python scripts/measure_sps_drafts.py --threads 2 --prompts 8 --drafts int8,layers:6,layers:10,layers:15
"""

from __future__ import annotations

import argparse

import torch

from specbench.budget import best_budget
from specbench.calibration import CALIBRATION_TOKENS, calibration_trajectories, default_calibration_file
from specbench.drafters.sps import SpSDrafter
from specbench.harness.budgets import measure_loop_timing
from specbench.model import cache_root, load_target
from specbench.profile import cached_profile, measure_and_cache
from specbench.prompts import PromptBuilder
from specbench.replay import budget_point, sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8, help="calibration prompts replayed")
    parser.add_argument("--drafts", default="int8,layers:6,layers:10,layers:15")
    parser.add_argument("--budgets", default="2,3,4,5", help="tree budgets (a chain of budget - 1 drafts)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target("default")
    prompts = PromptBuilder(target.tokenizer)
    trajectories, _ = calibration_trajectories(target, prompts, default_calibration_file(), CALIBRATION_TOKENS,
                                               None, cache_root())
    trajectories = trajectories[: args.prompts]
    profile = cached_profile(target, cache_root()) or measure_and_cache(target, cache_root())[0]
    timing = measure_loop_timing(target, trajectories[0].prompt.tolist())
    print(f"loop: 1-node verify {timing.verify1_ms:.1f} ms, overhead {timing.overhead_ms:.1f} ms per step")
    budgets = [int(b) for b in args.budgets.split(",")]
    print("| self-draft | " + " | ".join(f"depth {b - 1}" for b in budgets) + " | best |")
    print("| --- | " + " | ".join("---" for _ in budgets) + " | --- |")
    for spec in args.drafts.split(","):
        drafter = SpSDrafter(self_draft=spec, depth=max(budgets) - 1)
        table = sweep(target, {spec: drafter}, [("calibration", t) for t in trajectories], budgets, CALIBRATION_TOKENS)
        points = [budget_point(row) for row in table[table["category"] == "overall"].itertuples()]
        best, predicted = best_budget(points, profile, timing.overhead_ms, timing.verify1_ms)
        cells = [f"tau {p.tau:.2f}, draft {p.draft_ms:.0f} ms -> {predicted[p.budget]:.2f}" for p in points]
        print(f"| {spec} | " + " | ".join(cells) + f" | depth {best - 1}: {predicted[best]:.2f} |", flush=True)
        del drafter


if __name__ == "__main__":
    main()
