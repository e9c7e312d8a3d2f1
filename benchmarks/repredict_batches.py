"""`auto`'s batch predictions of a stored run, recomputed with the draft cost it uses now (issue 43).

A run's manifest keeps, per drafter and batch size B > 1, the curve `auto` chose from: each budget's replayed
tau, its draft ms (the B-row replayed propose cost, which older runs scaled by batch 1's run/replay draft ratio)
and its predicted speedup. This takes the verify term back out of each stored prediction, puts the unscaled
draft cost in (divides by the ratio the manifest records), and prints the old and new predictions beside
the measured throughput speedup (`summary.csv`), and the budget the new prediction would have chosen. It
reads only the run directory; nothing is timed.

Run:  python -m benchmarks.repredict_batches docs/runs/issue43-refilled
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from benchmarks.run_table import run_table_main


def repredict(run: Path) -> pd.DataFrame:
    """One row per (batch size, drafter): chosen budget, old and new prediction, new best budget, measured."""
    manifest = json.loads((run / "manifest.json").read_text())
    calibration = manifest["calibration"]
    ratios = {name: record["ratio"] for name, record in calibration.get("draft_ratio", {}).items()}
    summary = pd.read_csv(run / "summary.csv")
    overall = summary[summary["category"] == "overall"].set_index(["batch_size", "drafter"])
    rows = []
    for size, record in sorted(calibration.get("batches", {}).items(), key=lambda item: int(item[0])):
        v1, overhead = record["loop"]["verify1_ms"], record["loop"]["overhead_ms"]
        for name, choice in manifest["budgets"].items():
            at_size = choice.get("batches", {}).get(size)
            if not at_size or at_size.get("how") != "auto" or name not in ratios:
                continue
            new = {}
            for point in at_size["curve"]:
                verify = point["tau"] * (v1 + overhead) / point["predicted_speedup"] - point["draft_ms"] - overhead
                new[point["budget"]] = point["tau"] * (v1 + overhead) / (verify + point["draft_ms"] / ratios[name] + overhead)
            best = max(new, key=new.get)
            measured = overall["throughput_speedup"].get((int(size), name), float("nan"))
            rows.append({"batch": int(size), "drafter": name, "budget": at_size["budget"],
                         "old_predicted": at_size["predicted_speedup"], "new_predicted": new[at_size["budget"]],
                         "new_best_budget": best, "measured": measured,
                         "measured_over_old": measured / at_size["predicted_speedup"],
                         "measured_over_new": measured / new[at_size["budget"]]})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    return run_table_main(argv, __doc__, "a run directory with batch sizes above 1 chosen by auto", repredict,
                          "repredict_batches: no auto choice at a batch size above 1 in this run")


if __name__ == "__main__":
    sys.exit(main())
