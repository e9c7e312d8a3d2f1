"""Cost of one verification forward by tree size: how many draft nodes a step can afford on this machine.

For each size n, a chain of n nodes is verified against a fixed prefix (fresh cache each repeat); the
median of the repeats is reported, and the ratio to the 1-node (vanilla) step.

Run:  python benchmarks/verify_cost.py --sizes 1,2,4,8,16,32,64 --prefix 300 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from specbench.model import load_target
from specbench.timing import wall_clock
from specbench.tree import DraftTree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="1,2,4,8,16,32,64")
    parser.add_argument("--prefix", type=int, default=300, help="cached prefix length")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model, args.device)
    prefix = torch.arange(100, 100 + args.prefix)
    rows = []
    for n in map(int, args.sizes.split(",")):
        times = []
        for _ in range(args.repeats):
            cache = target.new_cache()
            target.prefill(prefix, cache)
            tree = DraftTree.chain(5, list(range(10, 9 + n)))
            start = wall_clock(target.device)
            target.forward_tree(tree, cache)
            times.append((wall_clock(target.device) - start) * 1000)
        rows.append((n, statistics.median(times)))
    base = rows[0][1]
    print("nodes | ms (median) | x 1-node")
    for n, ms in rows:
        print(f"{n} | {ms:.1f} | {ms / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
