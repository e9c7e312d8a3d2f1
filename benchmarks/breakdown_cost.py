"""What does recording stage times cost the timed run? Breakdown on vs off, side by side, in one process.

``specbench run`` records per-stage times (draft, transform, verify, accept) in the headline run by
default. That is only fair if recording costs nothing measurable. This script generates the same prompts
with each drafter twice per round, stage timing on and off (order alternating per prompt), over several
rounds, and reports per drafter the ratio of total wall times (on / off) with a paired bootstrap 95% CI,
plus the number of marks recorded per step. Output ids must be identical with and without timing.

Run:  python benchmarks/breakdown_cost.py --bench mt_bench --prompts 8 --max-new-tokens 96 --rounds 3 \
          --drafters vanilla,hydra --threads 2
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from benchlib import first_turn_prompts
from specbench.harness.loop import generate
from specbench.model import load_target
from specbench.registry import create_drafter


def ratio_ci(on: np.ndarray, off: np.ndarray, draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """sum(on) / sum(off) and its paired bootstrap 95% interval over prompts."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(on), size=(draws, len(on)))
    ratios = on[picks].sum(axis=1) / off[picks].sum(axis=1)
    return float(on.sum() / off.sum()), float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--bench", default="mt_bench")
    parser.add_argument("--prompts", type=int, default=8, help="first turns of the first N questions")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--tree-budget", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drafters", default="vanilla,hydra")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target = load_target(args.model)
    prompts = first_turn_prompts(target, args.bench, args.prompts)
    results = {}
    for name in args.drafters.split(","):
        drafter = create_drafter(name)
        generate(target, drafter, prompts[0], 16, args.tree_budget)  # warm-up
        on, off, steps = np.zeros(len(prompts)), np.zeros(len(prompts)), 0
        for round_ in range(args.rounds):
            for i, prompt in enumerate(prompts):
                order = (True, False) if (i + round_) % 2 == 0 else (False, True)
                runs = {flag: generate(target, drafter, prompt, args.max_new_tokens, args.tree_budget, breakdown=flag)
                        for flag in order}
                if runs[True].output_ids != runs[False].output_ids:
                    raise SystemExit(f"{name}: ids differ with and without stage timing on prompt {i}")
                on[i] += runs[True].wall_s
                off[i] += runs[False].wall_s
                steps += len(runs[True].steps)
        ratio, low, high = ratio_ci(on, off)
        results[name] = {"wall_ratio_on_off": round(ratio, 4), "ci95": [round(low, 4), round(high, 4)],
                         "steps": steps, "seconds_on": round(float(on.sum()), 2), "seconds_off": round(float(off.sum()), 2)}
        print(f"{name}: breakdown on / off wall time = {ratio:.4f} [{low:.4f}, {high:.4f}] over {steps} steps", flush=True)
    print(json.dumps({"config": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
