"""What a verification tree costs against one node as the context grows, under each attention kernel.

`auto` prices a tree at the verify-cost profile's ratio t(n) / t(1), timed against a 300-token cache; a run's steps
see its own contexts (an MT-bench second turn starts past 400). This times, in one process, one verification forward
(`profile.single_forward`: a chain of ``n`` nodes against a ``prefix``-token cache, its slots dropped after) for each
(attention kernel, prefix, size) in rotating rounds, and prints each cell's median ms with its ratio to one node at
the same prefix and kernel (`specbench.attention`: ``repeat`` is transformers' ``sdpa``, which copies the cached keys
and values per query head under a mask; ``grouped`` reads them in place). Time it alone on the machine.

Run:  python -m benchmarks.tree_attention --prefixes 100,300,600,1000 --sizes 1,2,4,12 --rounds 15
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.benchlib import rotating_medians
from specbench.attention import KERNELS, chosen_attention, use_attention
from specbench.harness.autobudget.profile import single_forward, tree_of_size
from specbench.model import load_target


def time_cells(target, kernels: list[str], prefixes: list[int], sizes: list[int], rounds: int) -> dict:
    """{(kernel, prefix, size): median ms} over ``rounds`` rotating rounds after an untimed one (every cell once per
    round, the order shifted by one each round, so the machine's drift lands on every cell alike)."""
    forwards = {prefix: single_forward(target, prefix) for prefix in prefixes}  # tree -> ms, slots dropped after
    trees = {size: tree_of_size(size, "chain") for size in sizes}

    def timed(kernel: str, prefix: int, size: int):
        return lambda: (use_attention(target.model, kernel), forwards[prefix](trees[size]))[1]

    medians = rotating_medians({(k, p, n): timed(k, p, n) for k in kernels for p in prefixes for n in sizes}, rounds)
    use_attention(target.model, chosen_attention(target.device))  # the target's own again
    return medians


def table(medians: dict, kernels: list[str], prefixes: list[int], sizes: list[int]) -> str:
    """Markdown: one row per (kernel, prefix), each size's ms and ratio to one node."""
    lines = ["| kernel | prefix | " + " | ".join(f"{n} nodes ms (x1)" for n in sizes) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in sizes) + " |"]
    for kernel in kernels:
        for prefix in prefixes:
            one = medians[kernel, prefix, sizes[0]]
            cells = " | ".join(f"{medians[kernel, prefix, n]:.1f} ({medians[kernel, prefix, n] / one:.3f})" for n in sizes)
            lines.append(f"| {kernel} | {prefix} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefixes", default="100,300,600,1000", help="cached context lengths")
    parser.add_argument("--sizes", default="1,2,4,12", help="tree sizes (chains); the first is the ratios' base")
    parser.add_argument("--kernels", default=",".join(KERNELS), help=f"attention kernels, from {', '.join(KERNELS)}")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernels = args.kernels.split(",")
    prefixes = [int(value) for value in args.prefixes.split(",")]
    sizes = [int(value) for value in args.sizes.split(",")]
    target = load_target()
    medians = time_cells(target, kernels, prefixes, sizes, args.rounds)
    print(f"{args.rounds} rounds, {args.threads} threads, chains, one forward each (median ms, ratio to {sizes[0]} node)")
    print(table(medians, kernels, prefixes, sizes))


if __name__ == "__main__":
    main()
