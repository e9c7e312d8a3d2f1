"""What a draft vocabulary cut costs in accuracy and saves in drafting time, for a trained head drafter.

For each cut size (0 = the whole vocabulary): the held-out top-1 accuracy per head when the heads may
only propose the cut's tokens, the expected tau of the static tree at two budgets (from the per-rank
accuracies, as the drafter builds its tree), and the time to score 1, 2 and 4 draft rows and take their
top 8 (median; one target forward runs before each timing so the weights are as cold as in a decode step).

Run:  python benchmarks/draft_vocab.py --method hydra --sizes 0,32768,16384,8192,4096
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from specbench.checkpoint import load_checkpoint
from specbench.drafters.checkpointed import default_checkpoint
from specbench.drafters.draft_vocab import RANKING_KEY, DraftVocab, token_ranking
from specbench.drafters.static_tree import StaticTree
from specbench.drafters.training.heads import IGNORE, head_logits, heldout_inputs
from specbench.kv import commit_path
from specbench.model import cache_root, load_target
from specbench.registry import create_drafter
from specbench.tree import DraftTree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=["hydra", "medusa"], default="hydra")
    parser.add_argument("--checkpoint", default=None, help="path stem (default: the shipped one)")
    parser.add_argument("--cache", default=None, help="distillation cache (default: the model's)")
    parser.add_argument("--sizes", default="0,32768,16384,8192,4096")
    parser.add_argument("--budgets", default="3,16")
    parser.add_argument("--model", default="default")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model)
    stem = Path(args.checkpoint) if args.checkpoint else default_checkpoint(args.method, target.handle)
    drafter = create_drafter(args.method, checkpoint=str(stem), draft_vocab=0)  # builds and loads the heads
    drafter.reset(target.handle)
    module, config = drafter.module, drafter.recipe["hyperparameters"]
    cache = Path(args.cache or cache_root() / "distill" / f"{target.source.name}-{target.source.sha256[:16]}")
    ranking = load_checkpoint(stem, target.handle)[0].get(RANKING_KEY)
    if ranking is None:  # a checkpoint from before the ranking existed: measure it on the cache
        ranking = token_ranking(cache, target.config.vocab_size)
    hidden, windows = heldout_inputs(module, cache, config["num_heads"])
    hidden = hidden.to(target.dtype)  # stored as float16 in the cache
    budgets = [int(b) for b in args.budgets.split(",")]
    prefix = torch.arange(100, 400)
    past = target.new_cache()
    target.prefill(prefix, past)

    print(f"{args.method} ({stem.name}), {len(hidden)} held-out positions")
    print("draft vocab | held-out coverage | top-1 per head | " + " | ".join(f"expected tau @{b}" for b in budgets)
          + " | ms to score 1 / 2 / 4 rows")
    labels = windows[:, 1 : config["num_heads"] + 1].T  # [K, N]
    valid = labels != IGNORE
    for size in map(int, args.sizes.split(",")):
        vocab = DraftVocab(target.lm_head, ranking, size)
        allowed = torch.zeros(target.config.vocab_size, dtype=torch.bool)
        allowed[vocab.token_ids(torch.arange(vocab.size))] = True
        hits = torch.zeros(config["num_heads"], 8)
        with torch.no_grad():
            for start in range(0, len(hidden), 512):
                logits = head_logits(module, target, hidden[start : start + 512], windows[start : start + 512])
                top = logits.masked_fill(~allowed, float("-inf")).topk(8, dim=-1).indices  # [K, B, 8]
                batch = labels[:, start : start + 512]
                hits += ((top == batch[..., None]) & (batch != IGNORE)[..., None]).sum(1).float()
        accuracy = (hits / valid.sum(1, keepdim=True)).tolist()  # [K, 8]
        coverage = (allowed[labels[0][valid[0]]]).float().mean().item()
        taus = [StaticTree.from_accuracies(accuracy, b).expected_accepted(accuracy) for b in budgets]
        times = []
        for rows in (1, 2, 4):
            features = torch.randn(rows, target.config.hidden_size)
            samples = []
            for _ in range(args.repeats):
                target.forward_tree(DraftTree.chain(5, [6]), past)  # evict the drafter's rows like a decode step
                commit_path(past, prefix.numel(), [], 2)
                began = time.perf_counter()
                with torch.inference_mode():
                    vocab.token_ids(vocab.logits(features).topk(8, dim=-1).indices)
                samples.append(time.perf_counter() - began)
            times.append(1000 * statistics.median(samples))
        print(f"{size or 'all'} | {coverage:.3f} | {' / '.join(f'{row[0]:.3f}' for row in accuracy)} | "
              + " | ".join(f"{t:.3f}" for t in taus) + " | " + " / ".join(f"{t:.2f}" for t in times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
