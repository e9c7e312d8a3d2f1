"""Choose the CTC-drafter's slot count T and label count N by measurement.

Trains one small `ctc` checkpoint per (T, N) pair on the same slice of the distillation cache (same
seed, same steps) and prints each one's held-out CTC loss and offline acceptance: the CTC transform's
tree for every held-out anchor, walked along the target's true continuation (the tau greedy
verification would give), per tree budget.

    python benchmarks/ctc_slots.py --pairs 8:4,6:3,12:6 --max-train-samples 200 --out runs/ctc-slots
    python benchmarks/ctc_slots.py --pairs 5:3 --max-train-samples 1571 --epochs 4 --train-vocab 8192 --cache DIR --out DIR2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="8:4,6:3,12:6", help="comma-separated T:N pairs")
    parser.add_argument("--model", default="default")
    parser.add_argument("--max-train-samples", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--anchors-per-sample", type=int, default=32)
    parser.add_argument("--samples-per-step", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", default=None, help="distillation cache (default: the one `specbench distill` writes)")
    parser.add_argument("--train-vocab", type=int, default=0, help="train over the N most frequent tokens (0: all)")
    parser.add_argument("--out", required=True, help="folder for the checkpoints")
    args = parser.parse_args()
    rows = []
    for pair in args.pairs.split(","):
        slots, labels = (int(x) for x in pair.split(":"))
        stem = Path(args.out) / f"ctc-T{slots}-N{labels}"
        if not stem.with_name(stem.name + ".json").exists():
            subprocess.run([sys.executable, "-m", "specbench.harness.cli", "train", "ctc", "--model", args.model,
                            "--num-slots", str(slots), "--num-labels", str(labels), "--epochs", str(args.epochs),
                            "--max-train-samples", str(args.max_train_samples), "--anchors-per-sample",
                            str(args.anchors_per_sample), "--samples-per-step", str(args.samples_per_step),
                            "--threads", str(args.threads), "--train-vocab", str(args.train_vocab), "--no-progress",
                            "--out", str(stem)] + (["--cache", args.cache] if args.cache else []), check=True)
        recipe = json.loads(stem.with_name(stem.name + ".json").read_text())
        rows.append((slots, labels, recipe))
    budgets = list(rows[0][2]["metrics"]["heldout_tau_by_budget"])
    print("| T | N | held-out CTC loss | " + " | ".join(f"offline tau @{b}" for b in budgets) + " | training s |")
    print("| ---: | ---: | ---: | " + " | ".join("---:" for _ in budgets) + " | ---: |")
    for slots, labels, recipe in rows:
        metrics = recipe["metrics"]
        taus = " | ".join(f"{metrics['heldout_tau_by_budget'][b]:.3f}" for b in budgets)
        print(f"| {slots} | {labels} | {metrics['heldout_loss']:.3f} | {taus} | {recipe['training_seconds']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
