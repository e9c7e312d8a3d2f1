"""What one linear layer costs on this machine by number of rows, in two weight layouts.

`F.linear(x, W)` with W [out, in] (how nn.Linear stores it, and what the target and the drafters run)
against `x @ Wt` with a transposed copy Wt [in, out], for the default target's weight shapes, rows
1-64 (a verify forward multiplies every layer by as many rows as the tree has nodes). The median of 5
rounds, each timing every shape and row count; prints "rows: linear ms / x@Wt ms" per shape. It explains
the profile's shape on a CPU (2-3 rows cost 2-3x one row, 4+ rows take a cheaper path) and measures
how much a transposed copy would save where it wins (docs/performance.md, "Linear layouts").

Usage: python scripts/linear_layouts.py [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

SHAPES = {"q/o 576x576": (576, 576), "k/v 192x576": (192, 576), "gate/up 1536x576": (1536, 576),
          "down 576x1536": (576, 1536), "draft lm_head 8192x576": (8192, 576), "lm_head 49152x576": (49152, 576)}
ROWS = (1, 2, 3, 4, 8, 16, 64)


def per_call_ms(function, calls: int) -> float:
    for _ in range(3):
        function()
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, (out_features, in_features) in SHAPES.items():
        weight = torch.randn(out_features, in_features)  # [out, in], as nn.Linear stores it
        transposed = weight.t().contiguous()  # [in, out]
        calls = 20 if out_features > 10_000 else 100
        times: dict[tuple[int, str], list[float]] = {}
        for _ in range(args.rounds):
            for rows in ROWS:
                x = torch.randn(rows, in_features)  # [rows, in]
                times.setdefault((rows, "linear"), []).append(
                    per_call_ms(lambda: torch.nn.functional.linear(x, weight), calls))
                times.setdefault((rows, "x@Wt"), []).append(per_call_ms(lambda: x @ transposed, calls))
        cells = ", ".join(f"{rows}: {statistics.median(times[rows, 'linear']):.3f} / "
                          f"{statistics.median(times[rows, 'x@Wt']):.3f}" for rows in ROWS)
        print(f"{name}: {cells}")


if __name__ == "__main__":
    main()
