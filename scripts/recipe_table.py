"""One row per training recipe (``*.json`` next to a checkpoint) in the given folders: data size, epochs,
time, held-out top-1 per head or slot, and the offline tau at a tree budget (heads: the static tree's
expected acceptance from the held-out per-rank accuracies; ctc: the held-out walk of the CTC transform's
tree, a mean over anchors; eagle: its greedy chain's held-out accuracy by depth and expected length), and
for medusa, hydra and ctc recipes that record it, the decode-walk tau (tokens per step of the drafter's tree decoding the held-out
responses, positions weighted as decoding visits them: what a replay measures; see
`static_tree.decode_walk_tau`). Offline tau averages over positions (ctc) or assumes independent depths
(heads), and both run above the walk. Used for the learning-curve and recipe-choice tables in docs/training.md.

    python scripts/recipe_table.py runs/gpu/ckpt [--budget 16]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specbench.drafters.static_tree import StaticTree


def offline_tau(recipe: dict, budget: int) -> float | None:
    metrics = recipe["metrics"]
    if "heldout_chain_tau" in metrics:  # eagle: its greedy chain's (budget = depth + 1), not a tree's
        return metrics["heldout_chain_tau"]
    if "heldout_tau_by_budget" in metrics:
        return metrics["heldout_tau_by_budget"].get(str(budget))
    accuracy = metrics.get("heldout_topk_accuracy")
    if accuracy is None:  # a recipe without any acceptance estimate
        return None
    return StaticTree.from_accuracies(accuracy, budget).expected_accepted(accuracy)


def row(path: Path, budget: int) -> str:
    recipe = json.loads(path.read_text())
    hyper, data, metrics = recipe["hyperparameters"], recipe["data"], recipe["metrics"]
    size = data.get("train_positions") or data.get("train_samples")
    unit = "positions" if "train_positions" in data else "samples"
    top1 = metrics.get("heldout_chain") or metrics.get("heldout_top1")  # eagle: chain accuracy by depth
    if isinstance(top1, list):
        quality = " / ".join(f"{a:.3f}" for a in top1)
    elif top1 is not None:  # an early eagle recipe: first-token top-1 only
        quality = f"top-1 {top1:.3f}"
    else:
        quality = f"loss {metrics['heldout_loss']:.3f}"
    tau = offline_tau(recipe, budget)
    walk = metrics.get("heldout_walk_tau", metrics.get("heldout_walk_tau_by_budget", {})).get(str(budget))  # heads, ctc
    seconds = recipe.get("training_seconds", 0.0)
    return (f"| {path.stem} | {recipe['method']} | {size:,} {unit} | {hyper['epochs']} | {seconds:,.0f} s | "
            f"{quality} | {'-' if tau is None else f'{tau:.3f}'} | {'-' if walk is None else f'{walk:.3f}'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--budget", type=int, default=16)
    args = parser.parse_args()
    print(f"| recipe | method | training data | epochs | time | held-out top-1 per head (or loss) | offline tau @{args.budget} "
          f"| decode-walk tau @{args.budget} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for folder in args.folders:
        for path in sorted(folder.glob("*.json")):
            if "hyperparameters" in json.loads(path.read_text()):  # recipes only (not manifests)
                print(row(path, args.budget))


if __name__ == "__main__":
    main()
