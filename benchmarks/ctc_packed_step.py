"""Time one ctc training step (4 samples, 32 anchors each, forward and backward) two ways, side by side.

`per-sample`: a forward per sample (the CPU default); `packed`: the step's samples packed end to end in
one forward (the accelerator default; the same losses and gradients, tests/test_ctc.py). Uses the real
target and distillation cache, so the sequence lengths are the training's. Prints one JSON line.

    python benchmarks/ctc_packed_step.py --cache /work/cache/whole --device cpu --threads 2
    python benchmarks/ctc_packed_step.py --cache /tmp/w/cache --device cuda
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="distillation cache (specbench distill --out)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per path (after 3 warm-up steps)")
    parser.add_argument("--num-slots", type=int, default=4)
    parser.add_argument("--num-labels", type=int, default=2)
    parser.add_argument("--train-vocab", type=int, default=8192)
    args = parser.parse_args()

    from specbench.drafters.ctc_module import build_module
    from specbench.drafters.training.common import freeze, training_vocabularies
    from specbench.drafters.training.ctc import packed_losses, sample_loss
    from specbench.drafters.training.distill import iter_samples
    from specbench.model import load_target

    torch.set_num_threads(args.threads)
    target = load_target(args.model, args.device)
    freeze(target)
    cache = Path(args.cache)
    vocab = training_vocabularies(cache, target, args.train_vocab)[1]
    wanted = 4 * (args.steps + 3)
    samples = list(itertools.islice(iter_samples(cache, "train"), wanted))
    samples = list(itertools.islice(itertools.cycle(samples), wanted))  # a small cache is reused
    module = build_module("ctc", target.config.hidden_size, target.config.num_attention_heads, args.num_slots).to(target.device)

    def per_sample(batch: list, picks: torch.Generator) -> None:
        for sample in batch:
            loss = sample_loss(module, target, sample, args.num_labels, 32, picks, vocab)
            (loss / len(batch)).backward()
            loss.item()  # the loop's per-sample host sync

    def packed(batch: list, picks: torch.Generator) -> None:
        losses = packed_losses(module, target, batch, args.num_labels, 32, picks, vocab)
        (losses.sum() / len(batch)).backward()
        losses.tolist()

    def sync() -> None:
        if target.device.type == "cuda":
            torch.cuda.synchronize()

    ms = {}
    for name, step in (("per_sample", per_sample), ("packed", packed)):
        picks = torch.Generator().manual_seed(0)
        for i in range(3):
            step(samples[4 * i : 4 * i + 4], picks)
        sync()
        began = time.perf_counter()
        for i in range(3, args.steps + 3):
            module.zero_grad(set_to_none=True)
            step(samples[4 * i : 4 * i + 4], picks)
        sync()
        ms[name] = 1000 * (time.perf_counter() - began) / args.steps
    print(json.dumps({"device": str(target.device), "threads": args.threads, "steps": args.steps,
                      "ms_per_step": ms, "packed_speedup": ms["per_sample"] / ms["packed"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
