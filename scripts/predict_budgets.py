"""Re-predict a run's `auto` budget choices under other verify-cost profiles (other hardware).

A run with `--tree-budget auto` records, per drafter, the replayed curve it chose from: tau, draft ms
and the trees proposed at every candidate budget (manifest ``budgets``). Those do not depend on the
verify cost, so the choice on another machine follows from its profile alone. Draft cost is scaled by
the ratio of the two machines' one-node verify times (the drafter is assumed to speed up as the target
does), and the loop overhead is taken from the run.

Usage: python scripts/predict_budgets.py RUN_DIR PROFILE [PROFILE ...]
       (a PROFILE is a profile JSON file, or ``flat`` for a GPU-like profile: every size costs the same)
Prints one Markdown table per profile: each drafter's chosen budget and predicted speedup, and the
prediction at budgets 2, 4, 8, 16, 32 and 64.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specbench.budget import BudgetPoint, best_budget
from specbench.profile import VerifyProfile, load_profile
from specbench.results import read_manifest

SHOWN = (2, 4, 8, 16, 32, 64)


def flat_profile(sizes: list[int], one_ms: float) -> VerifyProfile:
    return VerifyProfile(key={"model": "flat"}, sizes=sizes, ms={"chain": [one_ms] * len(sizes),
                                                                 "bushy": [one_ms] * len(sizes)})


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    manifest = read_manifest(Path(argv[0]))
    if not manifest or not manifest.get("calibration"):
        print(f"{argv[0]}: not a run with --tree-budget auto (no calibration in manifest.json)", file=sys.stderr)
        return 2
    loop = manifest["calibration"]["loop"]
    curves = {name: choice["curve"] for name, choice in manifest["budgets"].items() if choice.get("curve")}
    for spec in argv[1:]:
        profile = flat_profile([1, 2, 4, 8, 16, 32, 64], loop["verify1_ms"]) if spec == "flat" else load_profile(Path(spec))
        one = profile.cost_ms(1)
        scale = one / loop["verify1_ms"]  # this machine's speed relative to the run's
        print(f"\n{spec}: 1-node verify {one:.1f} ms (the run's: {loop['verify1_ms']:.1f} ms)\n")
        print("| drafter | chosen budget | predicted | " + " | ".join(f"@{b}" for b in SHOWN) + " |")
        print("| --- | --- | --- | " + " | ".join("---" for _ in SHOWN) + " |")
        for name, curve in curves.items():
            points = [BudgetPoint(p["budget"], p["tau"], p["draft_ms"] * scale, p.get("trees", {})) for p in curve
                      if p["budget"] <= max(profile.sizes)]
            best, predictions = best_budget(points, profile, loop["overhead_ms"] * scale, one)
            cells = " | ".join(f"{predictions[b]:.2f}" if b in predictions else "" for b in SHOWN)
            print(f"| {name} | {best} | {predictions[best]:.2f} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
