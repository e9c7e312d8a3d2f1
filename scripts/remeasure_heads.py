"""Score medusa/hydra checkpoints again on a distillation cache's held-out split and add the held-out
metrics their recipes lack (the decode-walk tau of their trees, for recipes written before it existed);
the weights and recorded metrics are untouched (`training.heads.remeasure`).

    python scripts/remeasure_heads.py --cache DIR STEM [STEM ...] [--model default] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from specbench.drafters.training.heads import remeasure
from specbench.errors import SpecbenchError
from specbench.model import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stems", nargs="+", help="checkpoint stems (<stem>.safetensors + <stem>.json)")
    parser.add_argument("--cache", required=True, help="distillation cache; its held-out split is scored")
    parser.add_argument("--model", default="default")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        target = load_target(args.model, "cpu", "float32")
        for stem in args.stems:
            metrics = remeasure(Path(stem), Path(args.cache), target)
            recipe = json.loads(Path(stem + ".json").read_text(encoding="utf-8"))
            print(json.dumps({"checkpoint": Path(stem).name, "heldout_positions": metrics["heldout_positions"],
                              "top1_recorded": recipe["metrics"]["heldout_top1"],
                              "top1_now": metrics["heldout_top1"], "added": recipe["metrics_remeasured"]["added"],
                              "walk_tau": metrics["heldout_walk_tau"]}))
    except SpecbenchError as error:
        print(f"remeasure_heads: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
