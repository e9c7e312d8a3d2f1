"""`auto`'s prediction noise for a stored run made before `auto` recorded it: tau's standard error over the
calibration questions at each drafter's chosen budget, and how far the measured speedup lies from the prediction
in the combined standard errors (issue 40, item 4; the report's "Tree budgets" table shows the same for runs
that recorded it).

Runs since this change record, per budget, tau's standard error over the calibration questions (`tau_se`) and
the prediction's relative standard error (`predicted_relative_se`) in the manifest. For an earlier run this
records the run's calibration trajectories again (the package's set, cached under ``$SPECBENCH_CACHE``), replays
each drafter `auto` chose for at its chosen budget with the questions as units (`choose.points_with_noise`), and
prints: the calibration tau the manifest recorded and the one replayed here (they differ only where this
machine's greedy decoding differs from the run machine's), tau's SE and relative SE, the prediction's relative SE
(`predict.predicted_relative_se` with the manifest's profile, loop timing, draft ratio and prefill share: tau and
each question's trees together), the prediction with its 95% interval, the measured speedup with its CI, measured /
predicted and the miss in combined SEs (`metrics.miss_in_standard_errors`). Replay is greedy and deterministic;
nothing is timed (the prediction and its costs are the manifest's).

Run:  python -m benchmarks.calibration_noise docs/runs/main-job-xeon-8da82b7 [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from specbench.errors import SpecbenchError


def noise_table(run: Path, threads: int | None = None, target=None) -> pd.DataFrame:
    """One row per drafter `auto` chose for at batch 1 in ``run`` (see the module docstring). ``target``: an
    already loaded `TargetModel` (the tests' tiny one), else the run's model is loaded."""
    import torch

    from specbench import metrics
    from specbench.harness.autobudget.calibration import calibration_file, calibration_trajectories
    from specbench.harness.autobudget.choose import points_with_noise, with_draft_ratio
    from specbench.harness.autobudget.predict import predicted_relative_se
    from specbench.harness.autobudget.profile import VerifyProfile
    from specbench.harness.autobudget.replay import sweep
    from specbench.harness.autobudget.spec import create_entry
    from specbench.model import load_target
    from specbench.model_source import cache_root
    from specbench.prompts import PromptBuilder

    manifest = json.loads((run / "manifest.json").read_text())
    config, calibration = manifest["config"], manifest.get("calibration")
    if not calibration:
        raise SpecbenchError(f"{run}: no drafter's budget was chosen by auto (the manifest records no calibration)")
    if threads:
        torch.set_num_threads(threads)
    if target is None:
        target = load_target(config["model"], config["device"], config["dtype"], config.get("device_map"))
    prompts = PromptBuilder(target.tokenizer, config.get("template"))
    source = calibration_file(calibration["source"], config["bench"], config.get("categories"), config.get("limit"),
                              cache_root())
    trajectories, _, questions = calibration_trajectories(target, prompts, source, calibration["max_new_tokens"],
                                                          config.get("template"), cache_root())
    turns = [(f"question {index:04d}", t) for index, t in zip(questions, trajectories)]
    profile = VerifyProfile.from_json(manifest["profile"], "manifest")
    share = (calibration.get("prefill") or {}).get("share", 0.0)
    summary = pd.read_csv(run / "summary.csv")
    overall = summary[(summary["category"] == "overall") & (summary.get("batch_size", 1) == 1)]
    rows = []
    for name, choice in manifest["budgets"].items():
        shown = next((d for d in overall["drafter"] if d == name or d.startswith(name + " (")), None)  # lossy marks
        if choice["how"] != "auto" or shown is None:
            continue
        point = next(p for p in choice["curve"] if p["budget"] == choice["budget"])
        ratio = (calibration.get("draft_ratio") or {}).get(name, {})
        loop = ratio.get("loop") or calibration["loop"]
        drafter = create_entry(name, config.get("drafter_options") or {})
        table = sweep(target, {name: drafter}, turns, [choice["budget"]], calibration["max_new_tokens"],
                      progress=False)
        replayed = with_draft_ratio(points_with_noise(table), ratio.get("ratio", 1.0))[0]
        relative = predicted_relative_se(replayed, profile, loop["overhead_ms"], loop["verify1_ms"],
                                         ratio.get("run_overhead_ms"), share)
        relative = float("nan") if relative is None else relative
        measured = overall[overall["drafter"] == shown].iloc[0]
        low, high = measured["speedup_ci_low"], measured["speedup_ci_high"]
        predicted = point["predicted_speedup"]
        rows.append({"drafter": name, "budget": choice["budget"], "tau_manifest": point["tau"],
                     "tau_here": replayed.tau, "tau_se": replayed.tau_se,
                     "tau_relative_se": (replayed.tau_se or float("nan")) / replayed.tau,
                     "predicted_relative_se": relative, "predicted": predicted,
                     "predicted_low": predicted / math.exp(metrics.Z95 * relative),
                     "predicted_high": predicted * math.exp(metrics.Z95 * relative),
                     "measured": measured["speedup"], "ci_low": low, "ci_high": high,
                     "measured_over_predicted": measured["speedup"] / predicted,
                     "miss_se": metrics.miss_in_standard_errors(predicted, relative, measured["speedup"], low, high)})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory whose manifest recorded `auto`'s calibration")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    try:
        table = noise_table(args.run, args.threads)
    except SpecbenchError as exc:
        print(f"calibration_noise: error: {exc}", file=sys.stderr)
        return 2
    print(table.to_string(index=False, float_format=lambda value: f"{value:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
