"""Cost of one verification forward by tree size: how many draft nodes a step can afford on this machine.

The same measurement as `specbench profile` (``specbench.harness.autobudget.profile.measure_profile``: for each size n, a
tree of n nodes is verified against a fixed cached prefix and its slots dropped again, median of the
repeats), printed as a table without touching the profile cache. The pytest-benchmark suite times the
same forwards (``benchmarks/test_micro_verify.py``, docs/benchmarks.md) with saved baselines.

Run:  python benchmarks/verify_cost.py --sizes 1,2,4,8,16,32,64 --prefix 300 --repeats 7
"""

from __future__ import annotations

import argparse
import sys

import torch

from specbench.harness.autobudget.profile import TREE_SHAPES, measure_profile
from specbench.model import load_target


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
    profile = measure_profile(target, [int(n) for n in args.sizes.split(",")], args.shapes.split(","),
                              args.prefix, args.repeats)
    print(profile.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
