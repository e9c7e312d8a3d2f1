"""`auto`'s batch-1 predictions of a stored run, recomputed with the draft ratio it uses now (issue 40, item 4).

`auto` scales a drafter's replayed draft costs by c, its draft ms per step in a real decode over replay's at
the same budget. Runs before the change took replay's side from a second replay of the first calibration turn,
timed at another moment than the replayed curve; `auto` now takes it from the curve's own point
(`choose.draft_ratio`). A run's manifest keeps everything both need: the curve (tau, draft ms scaled by the old c,
trees), the old c, the real decode's draft ms, the loop timed beside it and the verify-cost profile. This divides
the old c back out, applies the new one, predicts every budget again with the code `auto` runs
(`predict.best_budget`), and prints old and new beside the measured speedup (`summary.csv`) and the budget the new
prediction would have chosen. It reads only the run directory; nothing is timed. ``--profile FILE`` prices the
trees with another verify-cost profile instead of the manifest's (one measured again on the same machine, say), so
what a profile alone moved can be read off.

Run:  python -m benchmarks.repredict_draft_ratio docs/runs/main-job-0f3f4dd
      python -m benchmarks.repredict_draft_ratio docs/runs/main-job-epyc-cb55c49 --profile PROFILE.json
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchmarks.run_table import run_table_main
from specbench.harness.autobudget.choose import draft_ratio, with_draft_ratio
from specbench.harness.autobudget.predict import BudgetPoint, best_budget
from specbench.harness.autobudget.profile import VerifyProfile, load_profile


def repredict(run: Path, profile_file: Path | None = None) -> pd.DataFrame:
    """One row per drafter `auto` chose for at batch 1: budget, old and new c and prediction, new best, measured.
    ``profile_file``: a verify-cost profile to price the trees with (default: the run's own, from its manifest)."""
    manifest = json.loads((run / "manifest.json").read_text())
    calibration = manifest["calibration"]
    profile = load_profile(profile_file) if profile_file else VerifyProfile.from_json(manifest["profile"], "manifest")
    summary = pd.read_csv(run / "summary.csv")
    measured = summary[(summary["category"] == "overall") & (summary["batch_size"] == 1)].set_index("drafter")["speedup"]
    share = (calibration.get("prefill") or {}).get("share", 0.0)
    rows = []
    for name, old in calibration.get("draft_ratio", {}).items():
        choice, loop = manifest["budgets"][name], old.get("loop") or calibration["loop"]
        replayed = [BudgetPoint(p["budget"], p["tau"], p["draft_ms"] / old["ratio"], p.get("trees") or {})
                    for p in choice["curve"]]
        new = draft_ratio({key: old[key] for key in ("budget", "steps", "run_ms")}, replayed)
        terms = (loop["overhead_ms"], loop["verify1_ms"], old.get("run_overhead_ms"), share)  # runs before: None, 0
        best, predictions = best_budget(with_draft_ratio(replayed, new["ratio"]), profile, *terms)
        _, old_predictions = best_budget([replace(p, draft_ms=p.draft_ms * old["ratio"]) for p in replayed], profile,
                                         *terms)
        budget, speedup = choice["budget"], measured.get(name, float("nan"))
        rows.append({"drafter": name, "budget": budget, "old_ratio": old["ratio"], "new_ratio": new["ratio"],
                     "old_predicted": old_predictions[budget], "new_predicted": predictions[budget],
                     "new_best_budget": best, "measured": speedup,
                     "measured_over_old": speedup / old_predictions[budget],
                     "measured_over_new": speedup / predictions[budget]})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    return run_table_main(argv, __doc__, "a run directory whose budgets auto chose", repredict,
                          "repredict_draft_ratio: no draft ratio in this run's manifest (no auto budget)",
                          (("--profile", {"dest": "profile_file", "type": Path,
                                         "help": "a verify-cost profile file instead of the run's"}),))


if __name__ == "__main__":
    sys.exit(main())
