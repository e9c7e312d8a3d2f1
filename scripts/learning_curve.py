"""The learning curve of an eagle3 training run as a markdown table: held-out greedy chain acceptance by depth
and its tau against training tokens seen, read from the run's ``<stem>.curve.json`` when it has finished, else
from its newest checkpoint (``<stem>.partial.pt`` or ``<stem>.epochN.pt``: the points so far, so a run that spans
sessions can be read while it trains). Used for docs/training-runs tables.

    python scripts/learning_curve.py /work/e3/eagle3-full
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stem", type=Path)
    args = parser.parse_args()
    curve, source = points(args.stem)
    print(f"<!-- {source} -->")
    print("| epoch | tokens seen | chain tau | right at depth 1 / 2 / 3 / 4 / 5 (chain) |")
    print("| ---: | ---: | ---: | --- |")
    for point in curve:
        chain = " / ".join(f"{x:.3f}" for x in point["heldout_chain"])
        print(f"| {point['epoch']} | {point['tokens_seen']:,} | {point['heldout_chain_tau']:.3f} | {chain} |")


if __name__ == "__main__":
    main()
