"""Score ctc/ctc-ce checkpoints again on a distillation cache's held-out split with today's search
defaults: held-out loss, and offline tau by budget both as a mean over anchors and as the decode walk
(what a greedy replay of the held-out responses accepts). Checkpoints whose recipes were scored with
another search, or before the walk existed, then compare on equal terms; nothing is written
(`training.ctc.rescore`).

    python scripts/ctc_offline_tau.py --cache DIR STEM [STEM ...] [--budgets 4,8,16,32] [--model default] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from specbench.drafters.training.ctc import ctc_recipe, rescore
from specbench.errors import SpecbenchError
from specbench.model import load_target


def budget_list(text: str) -> list[int]:
    """'4,8,16' -> [4, 8, 16]; argparse turns the ValueError into a one-line usage error."""
    budgets = [int(part) for part in text.split(",")]
    if min(budgets) < 1:
        raise ValueError(text)
    return budgets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stems", nargs="+", help="checkpoint stems (<stem>.safetensors + <stem>.json)")
    parser.add_argument("--cache", required=True, help="distillation cache; its held-out split is scored")
    parser.add_argument("--budgets", type=budget_list, default=None, help="tree budgets (default: the training ones)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        recipes = {stem: ctc_recipe(Path(stem)) for stem in args.stems}  # every stem checked before the model loads
        target = load_target(args.model, "cpu", "float32")
        for stem, recipe in recipes.items():
            metrics = rescore(Path(stem), Path(args.cache), target, args.budgets)
            print(json.dumps({"checkpoint": Path(stem).name, "heldout_anchors": metrics["heldout_anchors"],
                              "heldout_loss": metrics["heldout_loss"],
                              "tau_recorded": recipe["metrics"]["heldout_tau_by_budget"],
                              "tau_now": metrics["heldout_tau_by_budget"],
                              "walk_tau_now": metrics["heldout_walk_tau_by_budget"]}))
    except SpecbenchError as error:
        print(f"ctc_offline_tau: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
