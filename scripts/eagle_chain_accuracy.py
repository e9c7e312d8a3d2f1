"""Held-out chain accuracy by depth of an eagle checkpoint (`training.eagle.chain_accuracy`): how often
the draft's greedy chain, feeding its own features back, is right at depth d and at every depth <= d.
Recipes written since this metric exists carry it; this scores older checkpoints and other caches.

    python scripts/eagle_chain_accuracy.py --checkpoint STEM --cache DIR [--levels 5] [--model default]
"""

from __future__ import annotations

import argparse
import json

import torch

from specbench.drafters.draft_vocab import DEFAULT_DRAFT_VOCAB
from specbench.drafters.eagle import EagleDrafter
from specbench.drafters.training.distill import iter_samples
from specbench.drafters.training.eagle import chain_accuracy
from specbench.model import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="eagle checkpoint stem (or SafeAILab directory)")
    parser.add_argument("--cache", required=True, help="distillation cache; its held-out split is scored")
    parser.add_argument("--levels", type=int, default=5)
    parser.add_argument("--model", default="default")
    parser.add_argument("--draft-vocab", type=int, default=DEFAULT_DRAFT_VOCAB)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model, "cpu", "float32")
    drafter = EagleDrafter(checkpoint=args.checkpoint, draft_vocab=args.draft_vocab)
    drafter.reset(target.handle)  # drafter.vocab: the draft vocabulary inference uses
    samples = list(iter_samples(args.cache, "heldout"))
    print(json.dumps(chain_accuracy(drafter.module, target, samples, drafter.vocab, args.levels)))


if __name__ == "__main__":
    main()
