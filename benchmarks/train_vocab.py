"""Does training over the draft vocabulary cost accuracy? Full vocabulary vs a cut, same data, same seed.

For each method, heads are trained twice on the same positions of a distillation cache, once scoring the
whole vocabulary (``--train-vocab 0``) and once the N most frequent tokens (``--train-vocab N``), with the
same seed, batches and epochs. Reported per run: training seconds per 1,000 positions and held-out top-1 /
top-5 per head, both runs scored over the same vocabulary (the one inference drafts over by default), so
the accuracies compare what the drafter will do at run time.

Run:  python benchmarks/train_vocab.py --cache DIR --methods hydra,medusa --train-vocab 8192 \
          --max-train-positions 40000 --epochs 1 --threads 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from specbench.drafters.training.heads import HeadTrainConfig, train_heads
from specbench.model import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="a distillation cache (specbench distill --out)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--methods", default="hydra,medusa")
    parser.add_argument("--train-vocab", type=int, default=8192)
    parser.add_argument("--max-train-positions", type=int, default=40000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for method in args.methods.split(","):
            for vocab in (0, args.train_vocab):
                config = HeadTrainConfig(method=method, cache=args.cache, out=str(Path(folder) / f"{method}-{vocab}"),
                                         epochs=args.epochs, max_train_positions=args.max_train_positions,
                                         train_vocab=vocab)
                recipe = train_heads(config, target, progress=False)
                positions = recipe["data"]["train_positions"] * args.epochs
                metrics = recipe["metrics"]
                row = {"method": method, "train_vocab": vocab or "all", "positions": positions,
                       "seconds": round(recipe["training_seconds"], 1),
                       "ms_per_1000_positions": round(1e6 * recipe["training_seconds"] / positions, 1),
                       "heldout_top1": [round(a, 4) for a in metrics["heldout_top1"]],
                       "heldout_top5": [round(a, 4) for a in metrics["heldout_top5"]],
                       "heldout_positions": metrics["heldout_positions"], "scored_over": metrics["heldout_vocab"]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    for method in args.methods.split(","):
        full, cut = [r for r in rows if r["method"] == method]
        print(f"{method}: {full['seconds'] / cut['seconds']:.2f}x less training time with {args.train_vocab} tokens; "
              f"top-1 per head {full['heldout_top1']} -> {cut['heldout_top1']}")


if __name__ == "__main__":
    main()
