"""Report tables, built from answer records with `reports.summary` and `specbench.metrics` (no formula is
re-implemented here). Each `Table` holds the numbers (for CSV and charts) and their display strings (for
Markdown, HTML and LaTeX).

Rows of the category table, per drafter: every category in file order, ``overall``, then ``turn 1``,
``turn 2``, ... (the same summary computed over one turn of every question). Acceptance per depth counts
a step at depth d only when it proposed a node at depth d (the step record's ``depth``), so a step that
proposed nothing is no rejection; records without ``depth`` fall back to counting every step.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbench import metrics
from specbench.reports.runs import RunResults
from specbench.reports.summary import OVERALL, question_table, summarize, summarize_run
from specbench.results import BASELINE, Answer, batch_folders, drafter_order

SHOWN_DEPTHS = 4  # acceptance columns in the displayed category table (the CSV has every depth)
STAGE_ORDER = ("verify", "draft", "transform", "accept", "other")
STAGE_LABELS = {"verify": "target forward", "draft": "draft module", "transform": "transform",
                "accept": "accept + KV commit", "other": "other"}
STAGE_HEADERS = {"verify": "Target forward", "draft": "Draft module", "transform": "Transform",
                 "accept": "Accept + KV commit", "other": "Other"}
DASH = "–"
# Fewest questions a speedup CI is shown for: below it the percentile bootstrap over questions is too narrow to
# be read as 95% (docs/reports.md, "Confidence intervals"); the cell says "n<5: no CI" instead.
MIN_CI_N = 5
GGUF_QUANT = re.compile(r"[.\-_]((?:I?Q\d+(?:_[A-Z0-9]+)*)|BF16|F16|F32)$", re.IGNORECASE)


@dataclass
class Table:
    """One table: ``data`` holds numbers (CSV, charts), ``display`` the same table as text."""

    name: str
    title: str
    data: pd.DataFrame
    display: pd.DataFrame
    note: str = ""


def fmt(value: float, digits: int = 2, suffix: str = "") -> str:
    return DASH if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}{suffix}"


def pct(value: float) -> str:
    return DASH if value is None or math.isnan(value) else f"{100 * value:.0f}%"


def model_label(model: dict, dtype: str) -> str:
    """The model as it ran: a GGUF file's quantisation is its storage, not its arithmetic (it is dequantised on
    load), so ``SmolLM2-135M-Instruct.Q4_1`` run in fp32 reads "SmolLM2-135M-Instruct (GGUF Q4_1, run in
    float32)"; other models read "NAME (run in DTYPE)"."""
    name = str(model.get("name") or "?")
    if str(model.get("path", "")).lower().endswith(".gguf"):
        match = GGUF_QUANT.search(name)
        base, quant = (name[:match.start()], match.group(1).upper()) if match else (name, "")
        return f"{base} (GGUF{' ' + quant if quant else ''}, run in {dtype})"
    return f"{name} (run in {dtype})"


# ---- records -> steps and turns ------------------------------------------------------------------------------
def step_table(answers: dict[str, list[Answer]]) -> pd.DataFrame:
    """One row per verification step: drafter, question_id, category, turn (1-based), accepted, depth, nodes."""
    rows = []
    for drafter, records in answers.items():
        for record in records:
            for turn, steps in enumerate(record.steps, start=1):
                rows += [(drafter, record.question_id, record.category, turn, step.accepted,
                          np.nan if step.depth is None else step.depth, np.nan if step.nodes is None else step.nodes)
                         for step in steps]
    return pd.DataFrame(rows, columns=["drafter", "question_id", "category", "turn", "accepted", "depth", "nodes"])


def turn_answers(answers: dict[str, list[Answer]], turn: int) -> dict[str, list[Answer]]:
    """The same records cut down to one turn (0-based), so `summarize` reports that turn alone."""
    return {drafter: [record.turn(turn) for record in records if turn < len(record.turns)]
            for drafter, records in answers.items()}


def acceptance(steps: pd.DataFrame, max_depth: int) -> tuple[list[float], list[float]]:
    """`metrics.acceptance_by_depth` of these steps, conditioned on the proposed depth when recorded."""
    depths = None if steps["depth"].isna().any() else steps["depth"].astype(int).to_numpy()
    return metrics.acceptance_by_depth(steps["accepted"].to_numpy(), max_depth, depths)


def max_depth(steps: pd.DataFrame) -> int:
    """Deepest proposed node (or deepest acceptance when depths are not recorded)."""
    if steps.empty:
        return 0
    if steps["depth"].isna().any():
        return int(steps["accepted"].max()) - 1
    return int(steps["depth"].max())


# ---- the category table ----------------------------------------------------------------------------------------
def category_summary(answers: dict[str, list[Answer]]) -> pd.DataFrame:
    """`summarize` rows plus per-turn rows, steps, share of steps with a draft, acceptance per depth."""
    summary = summarize(answers)
    turns = max(len(record.turns) for records in answers.values() for record in records)
    per_turn = []
    for turn in range(turns):
        rows = summarize(turn_answers(answers, turn))
        rows = rows[rows["category"] == OVERALL].assign(category=f"turn {turn + 1}")
        per_turn.append(rows)
    table = pd.concat([summary, *per_turn], ignore_index=True)
    table["order"] = [drafter_order(answers).index(d) for d in table["drafter"]]
    table = table.sort_values("order", kind="stable").drop(columns="order").reset_index(drop=True)

    steps = step_table(answers)
    deepest = max_depth(steps)
    extra = []
    for drafter, category in zip(table["drafter"], table["category"]):
        mine = steps[steps["drafter"] == drafter]
        if category.startswith("turn "):
            mine = mine[mine["turn"] == int(category.split()[1])]
        elif category != OVERALL:
            mine = mine[mine["category"] == category]
        unconditional, conditional = acceptance(mine, deepest)
        proposed = (mine["depth"] > 0).mean() if not mine["depth"].isna().any() else np.nan
        extra.append({"steps": len(mine), "proposed_share": proposed,
                      **{f"accept_{d}": u for d, u in enumerate(unconditional, start=1)},
                      **{f"accept_cond_{d}": c for d, c in enumerate(conditional, start=1)}})
    return pd.concat([table, pd.DataFrame(extra)], axis=1)


def ci_shown(n: float) -> bool:
    """Whether a bootstrap CI over ``n`` questions is shown (`MIN_CI_N`)."""
    return not math.isnan(n) and n >= MIN_CI_N


def ci_cell(value: float, low: float, high: float, n: float) -> str:
    """``value [low, high] n=N``, or ``value (n<5: no CI)`` when too few questions for a CI."""
    if math.isnan(value):
        return DASH
    n_text = "?" if math.isnan(n) else str(int(n))
    if not ci_shown(n):
        return f"{fmt(value)} (n={n_text} < {MIN_CI_N}: no CI)"
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}] n={n_text}"


def _speedup_cell(row: pd.Series) -> str:
    if row["drafter"] == BASELINE:
        return "1.00 (ref)"
    return ci_cell(row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"], float(row["n_questions"]))


def category_table(data: pd.DataFrame) -> Table:
    """The per drafter x category table from `category_summary`'s numbers."""
    depths = [c for c in data.columns if c.startswith("accept_cond_")][:SHOWN_DEPTHS]
    display = pd.DataFrame({
        "Drafter": data["drafter"],
        "Category": data["category"],
        "Budget": [DASH if d == BASELINE or math.isnan(b) else str(int(b)) for d, b in zip(data["drafter"], data["tree_budget"])],
        "Questions": data["n_questions"].astype(str),
        "Tokens/s": [fmt(v, 1) for v in data["tokens_per_s"]],
        "τ": [fmt(v) for v in data["tau"]],
        "Speedup [95% CI]": [_speedup_cell(row) for _, row in data.iterrows()],
        "Equal to vanilla": ["ref" if d == BASELINE else pct(v)
                             for d, v in zip(data["drafter"], data["equal_to_vanilla"])],
        "Drafted": [DASH if d == BASELINE else pct(v) for d, v in zip(data["drafter"], data["proposed_share"])],
        **{f"α{c.rsplit('_', 1)[1]}": [pct(v) for v in data[c]] for c in depths},
    })
    note = ("Budget: max tree nodes per step the drafter ran at. τ: mean tokens per verification step (accepted drafts + "
            "bonus). Speedup: vanilla's time per token "
            f"over the drafter's, same questions, paired bootstrap 95% CI over the row's n questions (not shown below "
            f"n = {MIN_CI_N}: too few for a percentile bootstrap). Equal to vanilla: "
            "share of (question, turn) outputs identical to vanilla's, token for token. Drafted: share of steps where "
            "the drafter proposed anything. αd: acceptance at depth d "
            "given depth d-1 was accepted, over steps that proposed depth d. Turn rows: every question's turn alone.")
    note += "".join(" " + line for line in mismatch_warnings(data))
    return Table("by_category", "Per drafter and category", data, display, note)


# ---- ids against vanilla's -------------------------------------------------------------------------------
IDS_COUNTS = ("equal_turns", "near_tie_turns", "mismatch_turns", "unattributed_turns")


def ids_cell(row: pd.Series | None) -> str:
    """``equal / near-tie / mismatch`` turns of one drafter (overall row), marked when any is a mismatch or
    not attributed; ``ref`` for vanilla, a dash where ids are not compared (sampled runs)."""
    if row is None or any(isinstance(row[c], float) and math.isnan(row[c]) for c in IDS_COUNTS):
        return DASH
    if row["drafter"] == BASELINE:
        return "ref"
    equal, near, mismatch, pending = (int(row[c]) for c in IDS_COUNTS)
    cell = f"{equal} / {near} / {mismatch}"
    if not math.isnan(row["max_over_bound"]):
        cell += f" (max {row['max_over_bound']:.2f})"
    if pending:
        cell += f" +{pending} unattributed"
    return cell + (" MISMATCH" if mismatch else "")


def mismatch_warnings(summary: pd.DataFrame, label: str = "") -> list[str]:
    """One loud sentence per drafter with mismatch turns (overall rows of a summary)."""
    rows = summary[(summary["category"] == OVERALL) & (summary["mismatch_turns"] > 0)]
    where = f" ({label})" if label else ""
    return [f"WARNING{where}: {row['drafter']} has {int(row['mismatch_turns'])} MISMATCH turn(s) of "
            f"{int(row['turns'])}: its ids differ from vanilla's beyond the rounding bound of the run's dtype "
            f"(largest {row['max_over_bound']:.1f}x the bound), so its output is not the target's greedy output."
            for _, row in rows.iterrows()]


# ---- paper-style tables ------------------------------------------------------------------------------------
def _speedup_tau(speedup: float, tau: float) -> str:
    if math.isnan(tau):
        return DASH
    return f"{DASH} / {fmt(tau)}" if math.isnan(speedup) else f"{fmt(speedup)}× / {fmt(tau)}"


def paper_table(runs: list[RunResults], summaries: dict[str, pd.DataFrame]) -> Table:
    """Drafters as rows, runs as columns, overall "speedup / τ" (CTC-drafter Table 1 style). When the
    drafters did not all run at one tree budget (``auto``, per-drafter budgets, or runs that differ), each
    cell names its budget: a speedup means little without it."""
    drafters = drafter_order(d for run in runs for d in summaries[run.label]["drafter"])
    overall = {run.label: summaries[run.label][summaries[run.label]["category"] == OVERALL] for run in runs}
    budgets = {b for rows in overall.values() for d, b in zip(rows["drafter"], rows["tree_budget"])
               if d != BASELINE and not math.isnan(b)}
    compared = [run for run in runs if overall[run.label]["equal_turns"].notna().any()]  # greedy runs
    data_rows, shown = [], []
    for drafter in drafters:
        numbers, cells = {"drafter": drafter}, {"Drafter": drafter}
        for run in runs:
            row = overall[run.label][overall[run.label]["drafter"] == drafter]
            speedup, tau, budget = ((row["speedup"].iloc[0], row["tau"].iloc[0], row["tree_budget"].iloc[0])
                                    if len(row) else (np.nan, np.nan, np.nan))
            numbers[f"{run.label} speedup"], numbers[f"{run.label} tau"] = speedup, tau
            numbers[f"{run.label} tree_budget"] = budget
            cells[run.label] = _speedup_tau(speedup, tau)
            if len(budgets) > 1 and drafter != BASELINE and not math.isnan(budget):
                cells[run.label] += f" (b{int(budget)})"
        for run in compared:  # after every run's speedup column, so those read as before
            row = overall[run.label][overall[run.label]["drafter"] == drafter]
            row = row.iloc[0] if len(row) else None
            numbers |= {f"{run.label} {c}": (np.nan if row is None else row[c]) for c in (*IDS_COUNTS, "max_over_bound")}
            cells[f"{run.label}: ids equal / near-tie / mismatch"] = ids_cell(row)
        data_rows.append(numbers)
        shown.append(cells)
    budget_note = (f" Every drafter ran at tree budget {budgets.pop()}." if len(budgets) == 1 else
                   " (bN): the tree budget (nodes per verify, root included) the drafter ran at." if budgets else "")
    note = ("Overall speedup over vanilla / τ (mean tokens per step), all categories and turns; one column per run."
            + budget_note + " Sampling and verification: "
            + "; ".join(f"{run.label}: {run.sampling_label}" for run in runs) + ".")
    if compared:
        note += (" Ids equal / near-tie / mismatch: turns whose output ids equal vanilla's; differ within the "
                 "rounding bound of the run's dtype (the fp32 margin at the first divergence and every emitted "
                 "token's fp32 deficit; docs/decisions.md, 'Divergence attribution'); differ beyond it (a bug "
                 "until shown otherwise). (max r): the largest margin or deficit over its bound; unattributed: "
                 "divergent turns not re-scored yet (`specbench attribute RUN`).")
        note += "".join(" " + line for run in compared for line in
                        mismatch_warnings(overall[run.label], run.label if len(runs) > 1 else ""))
    return Table("paper", "Speedup / τ", pd.DataFrame(data_rows), pd.DataFrame(shown), note)


def category_paper_table(summary: pd.DataFrame) -> Table:
    """Drafters as rows, categories (and overall) as columns, "speedup / τ" per cell."""
    rows = summary[~summary["category"].str.startswith("turn ")]
    categories = list(dict.fromkeys(rows["category"]))
    data = rows.pivot(index="drafter", columns="category", values=["speedup", "tau"])
    drafters = drafter_order(rows["drafter"])
    shown = pd.DataFrame({"Drafter": drafters, **{
        category: [_speedup_tau(data.loc[d, ("speedup", category)], data.loc[d, ("tau", category)]) for d in drafters]
        for category in categories}})
    numbers = rows[["drafter", "category", "speedup", "tau"]].reset_index(drop=True)
    note = "Speedup over vanilla / τ per MT-bench category (the categories the run holds)."
    return Table("speedup_tau_by_category", "Speedup / τ by category", numbers, shown, note)


# ---- acceptance, histogram, breakdown ------------------------------------------------------------------------
def acceptance_table(run: RunResults) -> Table | None:
    """Rows: depth; per drafter (vanilla excluded): steps that proposed that depth, P(≥ d), P(d | d-1)."""
    steps = step_table(run.answers)
    steps = steps[steps["drafter"] != BASELINE]
    deepest = max_depth(steps)
    if deepest == 0:
        return None
    numbers, shown = [], {"Depth": [str(d) for d in range(1, deepest + 1)]}
    for drafter in drafter_order(steps["drafter"]):
        mine = steps[steps["drafter"] == drafter]
        unconditional, conditional = acceptance(mine, deepest)
        offered = [int((mine["depth"] >= d).sum()) if not mine["depth"].isna().any() else len(mine)
                   for d in range(1, deepest + 1)]
        for d in range(deepest):
            numbers.append({"drafter": drafter, "depth": d + 1, "steps_proposing": offered[d],
                            "accepted": unconditional[d], "accepted_given_previous": conditional[d]})
        shown[f"{drafter}: steps"] = [str(n) for n in offered]
        shown[f"{drafter}: P(≥d)"] = [pct(v) for v in unconditional]
        shown[f"{drafter}: P(d | d-1)"] = [pct(v) for v in conditional]
    note = ("Over all questions and turns. steps: steps that proposed a node at depth d; P(≥d): share of those "
            "that accepted d drafts or more; P(d | d-1): the same among those that also accepted depth d-1.")
    return Table("acceptance_by_depth", "Acceptance by depth", pd.DataFrame(numbers), pd.DataFrame(shown), note)


def histogram_table(run: RunResults) -> Table | None:
    """Rows: accepted length; per drafter (vanilla excluded) the share of steps (`metrics.accept_length_histogram`)."""
    drafters = [d for d in drafter_order(run.answers) if d != BASELINE]
    if not drafters:
        return None
    counts = {d: metrics.accept_length_histogram([a for r in run.answers[d] for a in r.accept_lengths])
              for d in drafters}
    lengths = sorted({length for c in counts.values() for length in c})
    totals = {d: max(sum(c.values()), 1) for d, c in counts.items()}
    data = pd.DataFrame([{"drafter": d, "accepted_length": n, "steps": counts[d].get(n, 0),
                          "share": counts[d].get(n, 0) / totals[d]} for d in drafters for n in lengths])
    shown = pd.DataFrame({"Accepted length": [str(n) for n in lengths], **{
        d: [f"{pct(counts[d].get(n, 0) / totals[d])} ({counts[d].get(n, 0)})" for n in lengths] for d in drafters}})
    note = "Share of verification steps (count) by tokens emitted per step (accepted drafts + bonus)."
    return Table("accept_lengths", "Accepted-length histogram", data, shown, note)


def breakdown_table(run: RunResults, summary: pd.DataFrame) -> Table | None:
    """Per drafter: decode ms per token and each stage's share of decode time; None without stage times."""
    overall = summary[(summary["category"] == OVERALL) & summary["other_share"].notna()]
    if overall.empty:
        return None
    questions = question_table(run.answers)
    rows = []
    for _, row in overall.iterrows():
        mine = questions[questions["drafter"] == row["drafter"]]
        decoded = sum(sum(lengths) for lengths in mine["accept_lengths"])  # tokens emitted by decode steps
        decode_ms = mine["wall_s"].sum() * 1000.0 - mine["prefill_ms"].sum()
        per_token = decode_ms / decoded if decoded else np.nan
        rows.append({"drafter": row["drafter"], "decode_ms_per_token": per_token, "prefill_ms": row["prefill_ms"],
                     **{f"{stage}_share": row[f"{stage}_share"] for stage in STAGE_ORDER},
                     **{f"{stage}_ms_per_token": row[f"{stage}_share"] * per_token for stage in STAGE_ORDER}})
    data = pd.DataFrame(rows)
    shown = pd.DataFrame({"Drafter": data["drafter"], "Decode ms/token": [fmt(v) for v in data["decode_ms_per_token"]],
                          "Prefill ms/turn": [fmt(v, 1) for v in data["prefill_ms"]],
                          **{STAGE_HEADERS[s]: [f"{100 * v:.1f}%" for v in data[f"{s}_share"]]
                             for s in STAGE_ORDER}})
    note = ("Shares of decode time (wall time minus prefill), all questions and turns. Target forward: the tree "
            "verification forward; draft module: drafter.propose minus transform; accept: compare, KV commit, "
            "drafter.accept; other: the rest of the loop. ms/token: decode time over tokens emitted by decode steps.")
    return Table("latency_breakdown", "Latency breakdown", data, shown, note)


# ---- tree budgets -----------------------------------------------------------------------------------------
def budget_table(run: RunResults, summary: pd.DataFrame) -> Table | None:
    """Per drafter: the budget it ran at and how it was chosen; for ``auto``, the calibration's τ and
    predicted speedup at that budget, the prediction redone with the run's own τ (same costs: it checks
    the cost model apart from how well the calibration set stands for the benchmark), and the measured
    speedup. None when the manifest records no budgets (runs before they were recorded)."""
    budgets = (run.manifest or {}).get("budgets")
    if not budgets:
        return None
    calibration = (run.manifest or {}).get("calibration") or {}
    ratios, share = calibration.get("draft_ratio") or {}, (calibration.get("prefill") or {}).get("share", 0.0)
    rows = []
    for name, choice in budgets.items():  # summary names may carry a lossy mark: "medusa (typical, lossy)"
        drafter = next((d for d in summary["drafter"].unique() if d == name or d.startswith(name + " (")), name)
        overall = summary[(summary["drafter"] == drafter) & (summary["category"] == OVERALL)]
        if drafter == BASELINE or overall.empty:
            continue
        tau, speedup = overall["tau"].iloc[0], overall["speedup"].iloc[0]
        point = next((p for p in choice.get("curve") or [] if p["budget"] == choice["budget"]), None)
        predicted = point["predicted_speedup"] if point else np.nan
        calibration_tau = point["tau"] if point else np.nan
        noise = (point or {}).get("predicted_relative_se")
        noise = np.nan if noise is None else float(noise)
        ci_low, ci_high = overall["speedup_ci_low"].iloc[0], overall["speedup_ci_high"].iloc[0]
        rows.append({"drafter": drafter, "how": choice["how"], "budget": choice["budget"],
                     "calibration_tau": calibration_tau, "run_tau": tau, "predicted_speedup": predicted,
                     "predicted_relative_se": noise,
                     "predicted_with_run_tau": with_run_tau(point, tau, share) if point else np.nan,
                     "draft_ratio": ratios.get(name, {}).get("ratio", np.nan),
                     "measured_speedup": speedup, "n_questions": overall["n_questions"].iloc[0],
                     "ci_low": ci_low, "ci_high": ci_high, "measured_over_predicted": speedup / predicted,
                     # judged only where the report shows the measured CI (`ci_shown`: a bootstrap over fewer
                     # questions is too rough to read a measurement's noise from)
                     "miss_se": metrics.miss_in_standard_errors(predicted, noise, speedup, ci_low, ci_high)
                     if ci_shown(float(overall["n_questions"].iloc[0])) else np.nan})
    if not rows:
        return None
    data = pd.DataFrame(rows)
    display = pd.DataFrame({
        "Drafter": data["drafter"], "Budget": [f"{b} ({h})" for b, h in zip(data["budget"], data["how"])],
        "τ calibration": [fmt(v) for v in data["calibration_tau"]], "τ run": [fmt(v) for v in data["run_tau"]],
        "Predicted [95%, τ noise]": [predicted_cell(v, se) for v, se in
                                     zip(data["predicted_speedup"], data["predicted_relative_se"])],
        "Predicted, run τ": [fmt(v) for v in data["predicted_with_run_tau"]],
        "Draft ratio": [fmt(v) for v in data["draft_ratio"]],
        "Measured [95% CI]": [ci_cell(s, lo, hi, float(n)) for s, lo, hi, n in
                              zip(data["measured_speedup"], data["ci_low"], data["ci_high"], data["n_questions"])],
        "Measured / predicted": [miss_cell(r, z) for r, z in zip(data["measured_over_predicted"], data["miss_se"])],
    })
    note = ("auto: the budget of highest predicted speedup; a step's is S(b) = τ(b) (v1 + o) / (v1 r(b) + c d(b) + "
            "o'), τ(b) and the draft cost d(b) replayed on the calibration set, c the draft ratio (the drafter's "
            "propose cost in a real run over replay's, measured on one calibration turn; a dash: not measured, "
            "c = 1), r(b) the verify-cost profile's ratio for the trees the drafter proposed, v1 and o this run's "
            "measured 1-node verify and loop overhead, o' the drafter's own overhead in that real decode (o in "
            "runs that did not record it); the prediction is the wall-time speedup (1 + p) / (p + 1 / S(b)), p the "
            "calibration turns' prefill over their plain decode time (0 in runs that did not record it). "
            "Predicted, run τ: the same costs with the run's τ. The prediction's 95% interval is its sampling noise "
            "over the calibration questions (the predicted speedup's standard error with questions as units, τ and "
            "the trees each question's steps proposed together); Measured / "
            "predicted gives the miss in the combined standard errors of that noise and the measurement's own "
            "(read off its CI), on the log scale: within ±1.96 the miss is no larger than which questions each set "
            "happened to hold explains; beyond it, it is flagged (the calibration's own timing noise is not in it, so "
            "a flagged miss points at the cost terms, or at a chance of one in twenty). Without an interval or SEs: "
            "not recorded (runs before it was), or too few questions for the measured CI.")
    if not run.sampling.greedy:
        note += (" The calibration replays greedy decoding (replay needs the target's known continuation), so at "
                 "temperature > 0 τ calibration and the prediction are greedy figures; compare τ run.")
    return Table("budgets", "Tree budgets: chosen, predicted and measured", data, display, note)


def predicted_cell(value: float, relative_se: float) -> str:
    """``value [low, high]``: a prediction with its 95% interval from τ's sampling noise (``value`` alone
    where the noise was not recorded)."""
    if math.isnan(value) or math.isnan(relative_se):
        return fmt(value)
    spread = math.exp(metrics.Z95 * relative_se)
    return f"{fmt(value)} [{fmt(value / spread)}, {fmt(value * spread)}]"


def miss_cell(ratio: float, miss_se: float) -> str:
    """``0.868 (-1.7 SE)``; a miss beyond the combined 95% noise is marked ``beyond question noise``."""
    if math.isnan(ratio):
        return DASH
    if math.isnan(miss_se):
        return f"{ratio:.3f}"
    flag = ", **beyond question noise**" if abs(miss_se) > metrics.Z95 else ""
    return f"{ratio:.3f} ({miss_se:+.1f} SE{flag})"


def batch_table(run: RunResults) -> Table | None:
    """A batch sweep (`--batch-size 1,2,4`): per drafter and batch size, overall throughput (tokens over the
    wall time that produced them), its ratio to vanilla's at the same batch size, per-sequence latency (ms per
    token, p50 / p95), τ and equality with vanilla at that size. None for a run without sub-runs batch-B/."""
    if not batch_folders(run.path):
        return None
    summary = summarize_run(run.path)
    data = summary[summary["category"] == OVERALL][
        ["drafter", "batch_size", "tree_budget", "throughput_tok_s", "throughput_speedup", "ms_per_token_p50",
         "ms_per_token_p95", "tau", "equal_to_vanilla", "n_questions"]].reset_index(drop=True)
    choices = (run.manifest or {}).get("budgets") or {}
    data["predicted_speedup"] = [predicted_at(choices.get(name), int(size))
                                 for name, size in zip(data["drafter"], data["batch_size"])]
    display = pd.DataFrame({
        "Drafter": data["drafter"], "Batch": data["batch_size"].astype(int),
        "Budget": [fmt(v, 0) for v in data["tree_budget"]],
        "Tokens/s": [fmt(v, 1) for v in data["throughput_tok_s"]],
        "× vanilla (same batch)": [fmt(v) for v in data["throughput_speedup"]],
        "Predicted (`auto`)": [fmt(v) for v in data["predicted_speedup"]],
        "ms/token p50": [fmt(v, 1) for v in data["ms_per_token_p50"]],
        "ms/token p95": [fmt(v, 1) for v in data["ms_per_token_p95"]],
        "τ": [fmt(v) for v in data["tau"]], "Equal to vanilla": [pct(v) for v in data["equal_to_vanilla"]],
    })
    note = ("Throughput at batch B > 1: the generated tokens of every batch pass over the passes' measured wall "
            "time (rows refilled as sequences end); × vanilla divides by vanilla's throughput at the same batch "
            "size. Equal to vanilla compares each sequence's ids with vanilla's at that batch size. Predicted: the "
            "throughput speedup `auto` predicted when it chose the budget at that batch size (blank for fixed budgets).")
    note += "".join(" " + line for line in drained_batches(data))
    return Table("batch_sizes", "Throughput and speedup by batch size", data, display, note)


#: a batch size needs at least this many questions per row for its throughput to be that of a refilled batch
REFILLED_QUESTIONS_PER_ROW = 4


def drained_batches(data: pd.DataFrame) -> list[str]:
    """A line for every batch size B > 1 whose run had fewer than `REFILLED_QUESTIONS_PER_ROW` x B questions: its
    passes spend much of their time draining (rows end and no question is left to refill them), so throughput
    follows the slowest rows' τ rather than the mean, and `auto`'s prediction (a full batch) overstates it."""
    lines = []
    for size, rows in data.groupby("batch_size"):
        questions = int(rows["n_questions"].max())
        if size > 1 and questions < REFILLED_QUESTIONS_PER_ROW * size:
            lines.append(f"Batch {int(size)}: {questions} questions, fewer than {REFILLED_QUESTIONS_PER_ROW} per row: "
                         f"the batch drains as rows end, so its throughput follows the slowest rows (use "
                         f"--limit or a larger question file for at least {REFILLED_QUESTIONS_PER_ROW * int(size)}).")
    return lines


def at_batch(entry: dict | None, size: int) -> dict | None:
    """A manifest entry (a drafter's `budgets` choice, or `calibration`) at batch size ``size``: itself at 1, else its
    ``batches`` entry for ``size`` (None when there is none)."""
    if not entry:
        return None
    return entry if size == 1 else (entry.get("batches") or {}).get(str(size))


def with_run_tau(point: dict, tau: float, share: float) -> float:
    """A chosen curve point's prediction with the run's τ in place of the calibration's (same costs): the step
    prediction scaled by τ run / τ calibration, then the prefill (runs without a recorded step prediction: the
    whole prediction scaled)."""
    step = point.get("step_speedup")
    if step is None:
        return point["predicted_speedup"] * tau / point["tau"]
    return metrics.wall_speedup(step * tau / point["tau"], share)


def predicted_at(choice: dict | None, size: int) -> float:
    """The speedup `auto` predicted for a manifest's budget choice at batch size ``size`` (NaN when fixed)."""
    if not choice or choice.get("how") != "auto":
        return np.nan
    value = (at_batch(choice, size) or {}).get("predicted_speedup")
    return np.nan if value is None else float(value)
