"""Issue 39: the README's main job from the commit before the move (old) and after it (new), same
calibration set: budgets chosen, calibration tau at each candidate budget, run tau, ids, speedup [CI]."""
import csv, json, sys
from pathlib import Path

def load(run):
    run = Path(run)
    rows = {r["drafter"]: r for r in csv.DictReader(open(run / "summary.csv")) if r["category"] in ("all", "overall", "ALL")}
    man = json.load(open(run / "manifest.json"))
    return rows, man

old_rows, old_m = load(sys.argv[1]); new_rows, new_m = load(sys.argv[2])
print("| drafter | budget old / new | calibration tau at chosen budget old / new | curve tau identical | run tau old / new | ids = vanilla old / new | speedup [95% CI] old | new | predicted old / new |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for name in old_rows:
    if name not in new_rows: continue
    o, n = old_rows[name], new_rows[name]
    ob, nb = old_m["budgets"][name], new_m["budgets"][name]
    ocurve = {p["budget"]: p["tau"] for p in ob.get("curve", [])}; ncurve = {p["budget"]: p["tau"] for p in nb.get("curve", [])}
    same_curve = "yes" if ocurve == ncurve else f"no (max diff {max(abs(ocurve[b]-ncurve.get(b, 0)) for b in ocurve):.4f})" if ocurve else "-"
    ct = lambda c, b: f"{c[b]:.3f}" if b in c else "-"
    f = lambda r: f"{float(r['speedup']):.2f} [{float(r['speedup_ci_low']):.2f}, {float(r['speedup_ci_high']):.2f}]"
    p = lambda b: f"{b['predicted_speedup']:.2f}" if b.get("predicted_speedup") else "-"
    print(f"| {name} | {ob['budget']} / {nb['budget']} | {ct(ocurve, ob['budget'])} / {ct(ncurve, nb['budget'])} | {same_curve} | "
          f"{float(o['tau']):.3f} / {float(n['tau']):.3f} | {o['equal_to_vanilla']} / {n['equal_to_vanilla']} | {f(o)} | {f(n)} | {p(ob)} / {p(nb)} |")
print("profiles (1-node verify ms):", {k: (m.get("profile") or {}).get("source") for k, m in (("old", old_m), ("new", new_m))})
