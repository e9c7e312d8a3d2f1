"""Do two runs of the same command give the same records? (A sharded run against a single-process one.)

Compares, per drafter: the question set and order, each question's output ids and accept lengths (every
turn), and the deterministic columns of summary.csv (tau, new tokens, equality with vanilla, question
counts, per category and overall). Timing columns differ by nature and are only shown.

Usage: python scripts/compare_runs.py RUN_A RUN_B
Prints one Markdown table (drafter, questions, ids equal, accept lengths equal, tau A, tau B, tokens/s A
and B) and exits 0 when everything deterministic is equal, 1 when something differs, 2 on bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from specbench.results import load_run

DETERMINISTIC = ["drafter", "category", "new_tokens", "tau", "equal_to_vanilla", "n_questions", "tree_budget"]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [Path(arg) for arg in argv]
    for run in runs:
        if not (run / "summary.csv").is_file():
            print(f"{run}: not a finished run (no summary.csv)", file=sys.stderr)
            return 2
    a, b = (load_run(run) for run in runs)
    summaries = [pd.read_csv(run / "summary.csv") for run in runs]
    same = sorted(a) == sorted(b)
    print(f"| drafter | questions | same order | ids equal | accept lengths equal | tau {runs[0].name} | "
          f"tau {runs[1].name} | tok/s {runs[0].name} | tok/s {runs[1].name} |")
    print("|---|---:|---|---|---|---:|---:|---:|---:|")
    for name in a:
        if name not in b:
            print(f"| {name} | only in {runs[0]} | | | | | | | |")
            continue
        ids_a = {r.question_id: r for r in a[name]}
        ids_b = {r.question_id: r for r in b[name]}
        order = [r.question_id for r in a[name]] == [r.question_id for r in b[name]]
        shared = ids_a.keys() & ids_b.keys()
        ids_equal = ids_a.keys() == ids_b.keys() and all(ids_a[q].output_ids == ids_b[q].output_ids for q in shared)
        accepts_equal = ids_a.keys() == ids_b.keys() and all(
            ids_a[q].accept_lengths == ids_b[q].accept_lengths for q in shared)
        overall = [s[(s.drafter == name) & (s.category == "overall")].iloc[0] for s in summaries]
        print(f"| {name} | {len(ids_a)} / {len(ids_b)} | {order} | {ids_equal} | {accepts_equal} | "
              f"{overall[0].tau:.3f} | {overall[1].tau:.3f} | {overall[0].tokens_per_s:.2f} | "
              f"{overall[1].tokens_per_s:.2f} |")
        same = same and order and ids_equal and accepts_equal
    columns = [c for c in DETERMINISTIC if c in summaries[0] and c in summaries[1]]
    try:
        pd.testing.assert_frame_equal(summaries[0][columns], summaries[1][columns])
        print(f"\nsummary.csv columns {', '.join(columns)}: equal")
    except AssertionError as difference:
        print(f"\nsummary.csv columns {', '.join(columns)} differ: {difference}")
        same = False
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
