"""What the default target's linear layers cost on this machine by number of rows, per kernel.

A verify forward multiplies every weight matrix by as many rows as the tree has nodes. This times the
products of a stack of layers shaped like the default target's (30 x q, k, v, o, gate, up, down: 425 MB in
float32, so each weight streams from memory as in a real forward, not from cache) for rows 1-64, with:

- ``torch``: ``F.linear(x, W)``, nn.Linear's own kernel;
- ``weight-left``: `specbench.linear.weight_left_linear`, ``(W @ x^T)^T`` with one row padded to two,
  what specbench's targets run on a CPU in float32 (docs/decisions.md, "Hardware");
- ``x@Wt``: ``x @ Wt`` with a transposed copy of the weight (a layout session 20 measured as a lead).

The median of ``--rounds`` rounds, each timing every kernel and row count once. Prints ms per stack and
the ratio to one row of the same kernel. docs/performance.md, "The weight-left kernel", has the table.

Usage: python scripts/linear_layouts.py [--threads 2] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from specbench.linear import weight_left_linear

LAYERS = 30
SHAPES = ((576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536))  # [out, in]
ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    weights = [torch.randn(out, width) for _ in range(LAYERS) for out, width in SHAPES]
    transposed = [w.t().contiguous() for w in weights]  # [in, out]
    kernels = {
        "torch": lambda k, x: F.linear(x, weights[k]),
        "weight-left": lambda k, x: weight_left_linear(x, weights[k]),
        "x@Wt": lambda k, x: x @ transposed[k],
    }
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for rows in ROWS:
            inputs = {width: torch.randn(rows, width) for width in (576, 1536)}  # [rows, in]
            for name, kernel in kernels.items():
                start = time.perf_counter()
                for k, weight in enumerate(weights):
                    kernel(k, inputs[weight.shape[1]])
                times.setdefault((name, rows), []).append((time.perf_counter() - start) * 1000)
    print("| rows | " + " | ".join(f"{name} ms | x1" for name in kernels) + " |")
    print("| ---: | " + " | ".join("---: | ---:" for _ in kernels) + " |")
    for rows in ROWS:
        cells = []
        for name in kernels:
            ms, one = statistics.median(times[name, rows]), statistics.median(times[name, 1])
            cells.append(f"{ms:.1f} | {ms / one:.2f}")
        print(f"| {rows} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
