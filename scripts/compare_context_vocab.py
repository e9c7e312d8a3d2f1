"""Tau with the context columns against without, per drafter and budget, from context_vocab_replay.sh's CSVs.

Usage: python scripts/compare_context_vocab.py DIR   (DIR holds BENCH-context-true.csv and BENCH-context-false.csv)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def overall_tau(rows: pd.DataFrame) -> pd.Series:
    """Tokens per step over every category, per (drafter, budget)."""
    sums = rows.groupby(["drafter", "budget"])[["tokens", "steps"]].sum()
    return sums.tokens / sums.steps


def main(folder: Path) -> None:
    for bench in sorted({path.name.split("-context-")[0] for path in folder.glob("*-context-*.csv")}):
        with_context = overall_tau(pd.read_csv(folder / f"{bench}-context-true.csv"))
        cut_only = overall_tau(pd.read_csv(folder / f"{bench}-context-false.csv"))
        table = pd.DataFrame({"cut only": cut_only, "cut + context": with_context,
                              "gain": with_context - cut_only}).round(4)
        print(f"{bench}\n{table.to_string()}\n")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/context-vocab"))
