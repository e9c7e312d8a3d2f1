"""``summary.csv``: one row per drafter and category, plus category ``overall``, computed from the
answer files alone (never from a model), with the formulas of `specbench.metrics`.

Stage shares are fractions of *decode* time (turn wall time minus prefill): draft + transform + verify +
accept + other = 1. They are empty for runs recorded with ``--no-breakdown``.
``equal_to_vanilla`` is the fraction of (question, turn) pairs whose ids equal vanilla's, computed from the
output ids of both (never from the records' claims, which `specbench.results.load_run` checks against the
ids). ``turns``, ``equal_turns``, ``near_tie_turns``, ``mismatch_turns`` and ``unattributed_turns`` count
those turns by how they compare (docs/decisions.md, "Divergence attribution"): equal ids; different ids
explained by rounding (the fp32 margin within the bound of the run's dtype); different beyond it (a bug,
flagged by `warnings`); different and not yet re-scored (`specbench attribute RUN`). ``max_over_bound`` is
the largest margin-or-deficit / bound of the divergent turns (above 1: a mismatch). All are empty for
sampled runs, whose ids are not compared.
``temperature``, ``verify`` and ``lossless`` say how the drafter's answers were sampled and verified
(records from before sampling existed count as greedy). ``tree_budget`` is the budget the drafter ran at
(empty for records that predate it; the largest if records of one drafter disagree, which only hand-merged
runs can do).
``batch_size`` and the columns after it (docs/decisions.md, "Batching"): a run with a batch sweep has one block
of rows per batch size (batch 1 from answers/, each B > 1 from batch-B/answers/), each compared with vanilla at
the same batch size; ``throughput_tok_s`` is generated tokens over the measured wall time that produced them
(at B > 1 the batch passes', overall rows only), ``throughput_speedup`` its ratio to vanilla's,
``ms_per_token_p50`` / ``p95`` per-sequence latency over (question, turn) pairs. At batch 1 a row is what it
always was, with ``batch_size`` 1 and ``throughput_tok_s`` = ``tokens_per_s``. (``speedup`` at B > 1 is the
ratio of per-sequence time per token, each sequence sharing the device with the others in its batch.)
``regime`` says how the target verified (`--regime`: eager, or compiled: static cache and compiled tree
steps; records from before regimes existed are eager). A run has one regime; two runs side by side in a
report compare them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specbench import metrics
from specbench.errors import SpecbenchError
from specbench.results import (
    ANSWERS,
    BASELINE,
    EQUAL,
    MISMATCH,
    NEAR_TIE,
    SUMMARY,
    UNATTRIBUTED,
    Answer,
    batch_folders,
    drafter_order,
    load_run,
    turn_outcomes,
)
from specbench.sampling import Sampling

COLUMNS = [
    "drafter", "category", "temperature", "verify", "lossless", "tree_budget", "n_questions", "new_tokens",
    "wall_s", "tokens_per_s", "tau", "speedup",
    "speedup_ci_low", "speedup_ci_high", "equal_to_vanilla", "prefill_ms", "draft_share", "transform_share",
    "verify_share", "accept_share", "other_share", "speedup_mean_throughput",
    "turns", "equal_turns", "near_tie_turns", "mismatch_turns", "unattributed_turns", "max_over_bound",
    "batch_size", "throughput_tok_s", "ms_per_token_p50", "ms_per_token_p95", "throughput_speedup", "regime",
]
OUTCOME_COLUMNS = {EQUAL: "equal_turns", NEAR_TIE: "near_tie_turns", MISMATCH: "mismatch_turns",
                   UNATTRIBUTED: "unattributed_turns"}
STAGE_SHARES = ("draft", "transform", "verify", "accept")
OVERALL = "overall"


def question_table(runs: dict[str, list[Answer]]) -> pd.DataFrame:
    """One row per (drafter, question): totals over turns, accept lengths and stage totals."""
    rows = []
    reference = {record.question_id: record for record in runs.get(BASELINE, [])}
    for drafter, records in runs.items():
        for record in records:
            outcomes = turn_outcomes(record, reference.get(record.question_id))
            known = None not in outcomes
            over = [entry.get("over_bound") for entry, outcome in zip(record.attribution or [], outcomes)
                    if outcome in (NEAR_TIE, MISMATCH) and entry.get("over_bound") is not None]
            sampling = Sampling.from_json(record.sampling)
            stages = dict.fromkeys(STAGE_SHARES, 0.0)
            timed = True
            for step in (step for turn in record.steps for step in turn):
                if not step.stage_ms:
                    timed = False
                    continue
                for name in STAGE_SHARES:
                    stages[name] += step.stage_ms.get(name, 0.0)
            prefill = record.prefill_ms
            timed = timed and len(prefill) == len(record.turns) and all(p is not None for p in prefill)
            rows.append(
                {
                    "drafter": drafter,
                    "question_id": record.question_id,
                    "category": record.category,
                    "temperature": sampling.temperature,
                    "verify": sampling.rule,
                    "lossless": sampling.lossless or drafter == BASELINE,  # vanilla proposes nothing: exact
                    "tree_budget": np.nan if record.tree_budget is None else record.tree_budget,
                    "new_tokens": sum(record.new_tokens),
                    "wall_s": sum(record.wall_time),
                    "accept_lengths": record.accept_lengths,
                    "batch_size": int(record.extra.get("batch_size", 1)),  # records before batches: 1
                    "regime": str(record.extra.get("regime", "eager")),  # records before regimes: eager
                    "ms_per_token": [wall * 1000.0 / tokens for wall, tokens in zip(record.wall_time, record.new_tokens)
                                     if tokens],
                    "batch_passes": record.extra.get("batch_passes") or [],
                    "turns": len(record.turns),
                    **{column: outcomes.count(outcome) if known else np.nan
                       for outcome, column in OUTCOME_COLUMNS.items()},
                    "max_over_bound": max(over) if over else np.nan,
                    "prefill_ms": sum(prefill) if timed else np.nan,
                    **{f"{name}_ms": (stages[name] if timed else np.nan) for name in STAGE_SHARES},
                }
            )
    return pd.DataFrame(rows)


def _summary_row(drafter: str, category: str, rows: pd.DataFrame, base: pd.DataFrame | None) -> dict:
    lengths = [length for record in rows["accept_lengths"] for length in record]
    wall = rows["wall_s"].sum()
    decode_ms = wall * 1000.0 - rows["prefill_ms"].sum()
    shares = {f"{name}_share": rows[f"{name}_ms"].sum() / decode_ms for name in STAGE_SHARES}
    timed = not rows["prefill_ms"].isna().any()
    compared = rows["equal_turns"].notna().all()
    if not timed:
        shares = dict.fromkeys(shares, np.nan)
    other = 1.0 - sum(shares.values()) if timed else np.nan
    row = {
        "drafter": drafter,
        "category": category,
        "temperature": rows["temperature"].iloc[0] if rows["temperature"].nunique() == 1 else np.nan,
        "verify": "/".join(dict.fromkeys(rows["verify"])),
        "lossless": bool(rows["lossless"].all()),
        "tree_budget": rows["tree_budget"].max(),
        "n_questions": len(rows),
        "new_tokens": int(rows["new_tokens"].sum()),
        "wall_s": wall,
        "tokens_per_s": rows["new_tokens"].sum() / wall,
        "tau": metrics.tau(lengths),
        "equal_to_vanilla": rows["equal_turns"].sum() / rows["turns"].sum() if compared else np.nan,
        "turns": int(rows["turns"].sum()),
        **{column: int(rows[column].sum()) if compared else np.nan for column in OUTCOME_COLUMNS.values()},
        "max_over_bound": rows["max_over_bound"].max(),
        "prefill_ms": rows["prefill_ms"].sum() / rows["turns"].sum() if timed else np.nan,
        **shares,
        "other_share": other,
        "speedup": np.nan, "speedup_ci_low": np.nan, "speedup_ci_high": np.nan, "speedup_mean_throughput": np.nan,
        **_batch_columns(category, rows, wall),
        "regime": "/".join(dict.fromkeys(rows["regime"])),  # eager or compiled (`--regime`)
    }
    if base is not None:
        paired = rows.merge(base, on="question_id", suffixes=("", "_base"))
        if len(paired):
            args = (paired["wall_s_base"], paired["new_tokens_base"], paired["wall_s"], paired["new_tokens"])
            row["speedup"] = metrics.totals_speedup(*args)
            row["speedup_ci_low"], row["speedup_ci_high"] = metrics.bootstrap_speedup_ci(*args)
            row["speedup_mean_throughput"] = metrics.mean_throughput_speedup(*args)
    return row


def _batch_columns(category: str, rows: pd.DataFrame, wall: float) -> dict:
    """``batch_size``; ``throughput_tok_s``: generated tokens over the wall time that produced them (batch 1:
    the turns' own wall time, so it equals ``tokens_per_s``; batch B > 1: the measured wall time of the batch
    passes the records name, each pass counted once; a pass mixes categories, so only the overall row has it);
    ``ms_per_token_p50`` / ``p95``: per-sequence latency, each turn's wall time over its tokens (at B > 1 the
    turn shares the device with the other rows). ``throughput_speedup`` is filled in by `summarize`."""
    sizes = rows["batch_size"].unique()
    size = int(sizes.max())
    if size == 1:
        throughput = rows["new_tokens"].sum() / wall
    elif category == OVERALL:
        throughput = metrics.pass_throughput([p for passes in rows["batch_passes"] for p in passes])
    else:
        throughput = np.nan
    latency = [value for turns in rows["ms_per_token"] for value in turns]
    return {
        "batch_size": size,
        "throughput_tok_s": throughput,
        "ms_per_token_p50": metrics.percentile(latency, 50),
        "ms_per_token_p95": metrics.percentile(latency, 95),
        "throughput_speedup": np.nan,
    }


def summarize(runs: dict[str, list[Answer]]) -> pd.DataFrame:
    """The summary table: drafters in run order (vanilla first), categories in file order, then overall.
    ``runs`` is one batch size's records (one answers/ folder): ``throughput_speedup`` divides each row's
    throughput by vanilla's in the same category, i.e. vanilla at the same batch size."""
    table = question_table(runs)
    if table.empty:
        raise SpecbenchError("no finished questions to summarize")
    base_all = table[table["drafter"] == BASELINE][["question_id", "wall_s", "new_tokens"]]
    base = base_all if len(base_all) else None
    categories = list(dict.fromkeys(table["category"]))
    drafters = drafter_order(runs)
    out = []
    for drafter in drafters:
        mine = table[table["drafter"] == drafter]
        for category in [*categories, OVERALL]:
            rows = mine if category == OVERALL else mine[mine["category"] == category]
            if len(rows):
                out.append(_summary_row(drafter, category, rows, base))
    reference = {row["category"]: row["throughput_tok_s"] for row in out if row["drafter"] == BASELINE}
    for row in out:  # vanilla's own rows give 1.0
        if reference.get(row["category"], 0) > 0:  # NaN compares False: no reference, no ratio
            row["throughput_speedup"] = row["throughput_tok_s"] / reference[row["category"]]
    return pd.DataFrame(out, columns=COLUMNS)


def summarize_run(out: Path) -> pd.DataFrame:
    """The summary of a run directory: its own answers/ (batch 1, or any run without a batch sweep), then
    each batch sub-run ``batch-B/`` in order of B, one block of rows per batch size, each with vanilla at that
    batch size as its baseline (docs/decisions.md, "Batching")."""
    sub_runs = batch_folders(out)
    parts = []
    if (Path(out) / ANSWERS).is_dir() or not sub_runs:
        parts.append(summarize(load_run(out)))  # no answers/ and no sub-run: load_run's one-line error
    for _, folder in sub_runs:
        parts.append(summarize(load_run(folder)))
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def write_summary(out: Path) -> pd.DataFrame:
    summary = summarize_run(out)
    summary.to_csv(Path(out) / SUMMARY, index=False, float_format="%.6g")
    return summary


def format_table(summary: pd.DataFrame, overall_only: bool = False) -> str:
    """A compact plain-text view for the terminal."""
    view = summary[summary["category"] == OVERALL] if overall_only else summary
    columns = ["drafter", "category", "n_questions", "new_tokens", "tokens_per_s", "tau", "speedup",
               "speedup_ci_low", "speedup_ci_high", "equal_to_vanilla"]
    if (view["verify"] != "greedy").any():  # sampled: say how, next to the numbers
        columns[2:2] = ["temperature", "verify", "lossless"]
    if view["other_share"].notna().any():
        columns += ["draft_share", "transform_share", "verify_share", "accept_share", "other_share"]
    if "batch_size" in view and (view["batch_size"] > 1).any():  # a batch sweep: the size and its throughput
        columns.insert(1, "batch_size")
        columns += ["throughput_tok_s", "throughput_speedup", "ms_per_token_p50", "ms_per_token_p95"]
    text = view[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}")
    lines = [*divergence_lines(summary), *warnings(summary)]
    return "\n".join([text, *lines])


def _overall(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[(summary["category"] == OVERALL) & (summary["drafter"] != BASELINE)
                   & summary["equal_turns"].notna()]


def divergence_lines(summary: pd.DataFrame) -> list[str]:
    """One line per drafter whose ids were compared: how its turns compare with vanilla's."""
    lines = []
    for _, row in _overall(summary).iterrows():
        at = f" at batch size {int(row['batch_size'])}" if row.get("batch_size", 1) > 1 else ""
        line = (f"ids vs vanilla{at}, {row['drafter']}: {int(row['equal_turns'])} equal, {int(row['near_tie_turns'])} "
                f"near-tie, {int(row['mismatch_turns'])} mismatch of {int(row['turns'])} turns")
        if row["unattributed_turns"]:
            line += f", {int(row['unattributed_turns'])} divergent not attributed"
        if not np.isnan(row["max_over_bound"]):
            line += f" (largest margin or deficit / bound {row['max_over_bound']:.2f})"
        lines.append(line)
    return lines


def warnings(summary: pd.DataFrame) -> list[str]:
    """The loud lines: drafters with mismatches (ids differ from vanilla's beyond rounding: a bug until shown
    otherwise), and divergent turns nothing has attributed yet."""
    overall = _overall(summary)
    out = []
    bad = overall[overall["mismatch_turns"] > 0]
    for _, row in bad.iterrows():
        out.append(f"WARNING: {row['drafter']}: {int(row['mismatch_turns'])} of {int(row['turns'])} turns MISMATCH "
                   f"vanilla beyond rounding (fp32 margin or token deficit over the bound of the run's dtype; "
                   f"largest {row['max_over_bound']:.1f}x the bound): its output is not the target's greedy "
                   f"output; look for a bug (answers/*.jsonl 'attribution' names the turns)")
    pending = overall[overall["unattributed_turns"] > 0]
    if len(pending):
        out.append(f"WARNING: {int(pending['unattributed_turns'].sum())} turns of "
                   f"{', '.join(pending['drafter'])} differ from vanilla's and are not attributed; "
                   f"`specbench attribute RUN_DIR` re-scores them (near-tie or mismatch)")
    return out
