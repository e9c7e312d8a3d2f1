"""The command line both `repredict_*` benchmarks share: one run directory in, one table of recomputed predictions
out (exit 2 with a one-line reason when the run has nothing to recompute)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd


def run_table_main(argv: list[str] | None, doc: str, run_help: str, build: Callable[..., pd.DataFrame],
                   empty: str, options: tuple[tuple[str, dict], ...] = ()) -> int:
    """Parse ``argv`` (one run directory, then ``options``: (flag, `add_argument` keywords) each, passed to
    ``build`` by name), print ``build(run, ...)`` to 3 decimals, or ``empty`` and 2 when it is empty."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("run", type=Path, help=run_help)
    for flag, spec in options:
        parser.add_argument(flag, **spec)
    arguments = vars(parser.parse_args(argv))
    table = build(arguments.pop("run"), **arguments)
    if table.empty:
        print(empty, file=sys.stderr)
        return 2
    print(table.to_string(index=False, float_format=lambda value: f"{value:.3f}"))
    return 0
