"""The learning curve of an eagle3 training run as a markdown table: held-out greedy chain acceptance by depth
and its tau against training tokens seen, read from the run's ``<stem>.curve.json`` when it has finished, else
from its newest checkpoint (``<stem>.partial.pt`` or ``<stem>.epochN.pt``: the points so far, so a run that spans
sessions can be read while it trains). Used for docs/training-runs tables: ``--write README.md`` puts the table
between that file's ``<!-- curve -->`` and ``<!-- /curve -->`` lines instead of printing it.

    python scripts/learning_curve.py /work/e3/eagle3-full [--write docs/training-runs/RUN/README.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def points(stem: Path) -> tuple[list[dict], str]:
    """(the curve's points, where they were read) of the run at ``stem``."""
    curve = stem.with_name(stem.name + ".curve.json")
    if curve.exists():
        return json.loads(curve.read_text())["curve"], curve.name
    import torch

    from specbench.drafters.training.common import curve_points

    checkpoints = sorted(stem.parent.glob(stem.name + ".epoch*.pt"), key=lambda p: int(p.suffixes[-2][6:]))
    partial = stem.with_name(stem.name + ".partial.pt")
    newest = max([*checkpoints, partial] if partial.exists() else checkpoints, key=lambda p: p.stat().st_mtime, default=None)
    if newest is None:
        raise SystemExit(f"no curve or checkpoint for {stem}")
    state = torch.load(newest, weights_only=False, map_location="cpu")
    return curve_points(state.get("batches", {}).get("points", []), state["history"]), newest.name


def table(curve: list[dict], source: str) -> list[str]:
    """The curve as markdown lines, headed by where it was read."""
    lines = [f"(read from `{source}` by `scripts/learning_curve.py`)", "",
             "| epoch | tokens seen | chain tau | right at depth 1 / 2 / 3 / 4 / 5 (chain) |", "| ---: | ---: | ---: | --- |"]
    for point in curve:
        chain = " / ".join(f"{x:.3f}" for x in point["heldout_chain"])
        lines.append(f"| {point['epoch']} | {point['tokens_seen']:,} | {point['heldout_chain_tau']:.3f} | {chain} |")
    return lines


def write_between_markers(path: Path, lines: list[str]) -> None:
    """Replace what lies between ``<!-- curve -->`` and ``<!-- /curve -->`` in ``path`` with ``lines``."""
    text = path.read_text().splitlines()
    try:
        start, end = text.index("<!-- curve -->"), text.index("<!-- /curve -->")
    except ValueError:
        raise SystemExit(f"{path}: no <!-- curve --> ... <!-- /curve --> lines") from None
    path.write_text("\n".join(text[: start + 1] + lines + text[end:]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stem", type=Path)
    parser.add_argument("--write", type=Path, help="a markdown file whose curve block to rewrite")
    args = parser.parse_args()
    lines = table(*points(args.stem))
    if args.write:
        write_between_markers(args.write, lines)
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
