"""What a batched verify costs over the whole cache against over its active width (issue 43's prediction gap).

At batch size B > 1 the loop verifies every row's tree in one forward over a `BatchTreeCache` whose capacity is
the run's longest prompt plus ``max_new_tokens`` plus the tree. The eager regime attends over the active width
(the longest row plus the tree, `BatchTreeCache.set_width`); before that change every step attended over the
whole capacity. This times `TargetModel.forward_trees` both ways, interleaved per repeat, for B rows of a
``prefix``-token sequence each scoring the same bushy tree, in a cache of ``capacity`` slots, and prints the
median ms and the whole/active ratio. Time it alone on the machine.

Run:  python -m benchmarks.batch_width --batches 4,8 --sizes 1,4,8 --prefixes 300,600 --capacity 1024
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from specbench.batch_cache import BatchTreeCache
from specbench.harness.autobudget.profile import synthetic_prefix, tree_of_size
from specbench.model import load_target
from specbench.timing import wall_clock


def ints(text: str) -> list[int]:
    return [int(value) for value in text.split(",")]


@torch.inference_mode()
def time_both(target, batch: int, size: int, prefix: int, capacity: int, repeats: int) -> dict:
    """Median ms of one forward of ``batch`` rows over the active width and over the whole capacity."""
    cache = target.new_batch_cache(batch, capacity)
    ids = synthetic_prefix(prefix) % target.lm_head.weight.shape[0]
    for row in range(batch):
        target.prefill_row(ids, cache, row)
    trees = [tree_of_size(size, "bushy")] * batch
    set_width = BatchTreeCache.set_width
    timings: dict[str, list[float]] = {"active": [], "whole": []}
    try:
        for repeat in range(repeats + 2):  # two untimed warm-ups
            for mode in ("active", "whole"):
                BatchTreeCache.set_width = set_width if mode == "active" else (lambda self, needed: set_width(self, None))
                start = wall_clock(target.device)
                target.forward_trees(trees, cache)
                if repeat >= 2:
                    timings[mode].append((wall_clock(target.device) - start) * 1000)
    finally:
        BatchTreeCache.set_width = set_width
    active, whole = (statistics.median(timings[mode]) for mode in ("active", "whole"))
    return {"batch": batch, "nodes": size, "prefix": prefix, "capacity": cache.capacity,
            "active_ms": active, "whole_ms": whole, "whole_over_active": whole / active}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--batches", default="4,8")
    parser.add_argument("--sizes", default="1,4,8")
    parser.add_argument("--prefixes", default="300,600")
    parser.add_argument("--capacity", type=int, default=1024, help="the batch cache's slots (the run's longest need)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model, "cpu")
    rows = [time_both(target, batch, size, prefix, args.capacity, args.repeats)
            for batch in ints(args.batches) for prefix in ints(args.prefixes) for size in ints(args.sizes)]
    print(f"{'batch':>5} {'nodes':>5} {'prefix':>6} {'capacity':>8} {'active ms':>9} {'whole ms':>9} {'whole/active':>12}")
    for row in rows:
        print(f"{row['batch']:>5} {row['nodes']:>5} {row['prefix']:>6} {row['capacity']:>8} {row['active_ms']:>9.1f} "
              f"{row['whole_ms']:>9.1f} {row['whole_over_active']:>12.3f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"threads": args.threads, "torch": torch.__version__, "rows": rows},
                                             indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
