"""Issue 39: the README's main job from the commit before the move (old) and after it (new), on the same
calibration set: budgets chosen, replayed tau curves, run tau, ids, speedup [CI], predicted speedup.

    python compare.py OLD_RUN NEW_RUN
"""

import csv
import json
import sys
from pathlib import Path


def load(run: str) -> tuple[dict, dict]:
    folder = Path(run)
    with open(folder / "summary.csv") as handle:
        rows = {r["drafter"]: r for r in csv.DictReader(handle) if r["category"] == "overall"}
    return rows, json.loads((folder / "manifest.json").read_text())


def curve(choice: dict) -> dict:
    return {point["budget"]: point["tau"] for point in choice.get("curve", [])}


def speedup(row: dict) -> str:
    return f"{float(row['speedup']):.2f} [{float(row['speedup_ci_low']):.2f}, {float(row['speedup_ci_high']):.2f}]"


def predicted(choice: dict) -> str:
    return f"{choice['predicted_speedup']:.2f}" if choice.get("predicted_speedup") else "-"


def main(old_run: str, new_run: str) -> None:
    old_rows, old_manifest = load(old_run)
    new_rows, new_manifest = load(new_run)
    print("| drafter | budget old / new | tau curves identical | run tau old / new | ids = vanilla old / new "
          "| speedup old | speedup new | predicted old / new |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, old in old_rows.items():
        if name not in new_rows:
            continue
        new = new_rows[name]
        old_choice, new_choice = old_manifest["budgets"][name], new_manifest["budgets"][name]
        same = "yes" if curve(old_choice) == curve(new_choice) else "no"
        print(f"| {name} | {old_choice['budget']} / {new_choice['budget']} | {same} "
              f"| {float(old['tau']):.3f} / {float(new['tau']):.3f} "
              f"| {old['equal_to_vanilla']} / {new['equal_to_vanilla']} | {speedup(old)} | {speedup(new)} "
              f"| {predicted(old_choice)} / {predicted(new_choice)} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
