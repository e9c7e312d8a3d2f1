"""Cost of one verification forward by tree size: how many draft nodes a step can afford on this machine.

For each size n, a tree of n nodes (a chain by default; ``--shapes chain,bushy`` adds wide, shallow trees)
is verified against a fixed cached prefix; after each repeat the tree's slots are dropped from the cache
again (`benchlib.rewind`), so every repeat verifies against the same prefix. The median of the repeats is
reported, and the ratio to the 1-node (vanilla) step. The pytest-benchmark suite times the same forwards
(``benchmarks/test_micro_verify.py``, docs/benchmarks.md) with saved baselines.

Run:  python benchmarks/verify_cost.py --sizes 1,2,4,8,16,32,64 --prefix 300 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from benchlib import TREE_SHAPES, prefilled_cache, rewind, synthetic_prefix, tree_of_size
from specbench.model import load_target
from specbench.timing import wall_clock


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="1,2,4,8,16,32,64")
    parser.add_argument("--shapes", default="chain", help=f"comma-separated, from {', '.join(TREE_SHAPES)}")
    parser.add_argument("--prefix", type=int, default=300, help="cached prefix length")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model, args.device)
    cache = prefilled_cache(target, synthetic_prefix(args.prefix))
    rows = []
    for shape in args.shapes.split(","):
        for n in map(int, args.sizes.split(",")):
            tree = tree_of_size(n, shape)
            times = []
            for _ in range(args.repeats):
                start = wall_clock(target.device)
                target.forward_tree(tree, cache)
                times.append((wall_clock(target.device) - start) * 1000)
                rewind(cache, args.prefix)
            rows.append((shape, n, statistics.median(times)))
    base: dict[str, float] = {}  # each shape's first size (1 node by default)
    print("shape | nodes | ms (median) | x first size")
    for shape, n, ms in rows:
        base.setdefault(shape, ms)
        print(f"{shape} | {n} | {ms:.1f} | {ms / base[shape]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
