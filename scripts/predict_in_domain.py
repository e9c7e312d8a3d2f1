"""How much of an `auto` run's prediction error is the calibration set's domain? Re-predict each auto
drafter's speedup at the budget the run chose, from a replay over questions of the run's own benchmark
that the run did not answer (the last ``--per-category`` of each category, `--calibration heldout`'s
questions), with the run's profile and loop timing; set it beside the recorded prediction and the
measured speedup. It shows what `--calibration heldout` would have predicted for a run made without it.

Usage: python scripts/predict_in_domain.py RUN_DIR [--per-category 2] [--model default]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from specbench.budget import predicted_speedup
from specbench.calibration import heldout_questions
from specbench.harness.budgets import create_entry
from specbench.model import load_target
from specbench.profile import VerifyProfile
from specbench.prompts import PromptBuilder
from specbench.replay import budget_point, question_trajectories, sweep
from specbench.results import read_manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--model", default="default")
    args = parser.parse_args()
    manifest = read_manifest(args.run_dir)
    config, loop = manifest["config"], manifest["calibration"]["loop"]
    profile = VerifyProfile.from_json(manifest["profile"], "the run's manifest")
    if config.get("threads"):
        torch.set_num_threads(config["threads"])
    questions = heldout_questions(config["bench"], config["categories"], config["limit"], args.per_category)
    target = load_target(args.model, config["device"], config["dtype"])
    prompts = PromptBuilder(target.tokenizer, config["template"])
    tokens = manifest["calibration"]["max_new_tokens"]
    turns = [(q.category, t) for q in questions for t in question_trajectories(target, prompts, q, tokens)]
    summary = pd.read_csv(args.run_dir / "summary.csv")
    measured = summary[summary.category == "overall"].set_index("drafter")
    print(f"{len(questions)} unanswered questions of {config['bench']} ({len(turns)} turns); "
          f"loop: 1-node verify {loop['verify1_ms']:.1f} ms, overhead {loop['overhead_ms']:.2f} ms\n")
    print("| drafter | budget | calibration tau | in-domain tau | run tau | predicted | predicted, in-domain | "
          "measured | measured / in-domain |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, choice in manifest["budgets"].items():
        if choice["how"] != "auto":
            continue
        budget = choice["budget"]
        drafter = create_entry(name, config.get("drafter_options") or {})
        table = sweep(target, {name: drafter}, turns, [budget], tokens)
        point = budget_point(table[table.category == "overall"].iloc[0].to_dict())
        in_domain = predicted_speedup(point, profile, loop["overhead_ms"], loop["verify1_ms"])
        calibration_tau = next(p["tau"] for p in choice["curve"] if p["budget"] == budget)
        run = measured.loc[name]
        print(f"| {name} | {budget} | {calibration_tau:.2f} | {point.tau:.2f} | {run.tau:.2f} | "
              f"{choice['predicted_speedup']:.2f} | {in_domain:.2f} | {run.speedup:.2f} | "
              f"{run.speedup / in_domain:.2f} |")


if __name__ == "__main__":
    main()
