"""Paper-ready charts (matplotlib, no pyplot state) from the numbers of `reports.tables`.

Sizes follow a two-column paper: ``WIDE`` figures span both columns (7 in), ``NARROW`` ones fit one
(3.4 in); text is 7-8 pt at that size, so it stays legible when placed at 100%. Drafter colours come from
Paul Tol's colour-blind-safe "muted" palette extended to 10 (`PALETTE`), fixed per drafter name, with a marker
(lines, points) or hatch (bars) per drafter as a second cue; vanilla is grey. Every function returns a
`Figure`, or None when the run holds nothing to draw (the caller notes why).
"""

from __future__ import annotations

import functools
import io
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from specbench.metrics import Z95
from specbench.reports.summary import OVERALL
from specbench.reports.tables import MIN_CI_N, STAGE_LABELS, STAGE_ORDER
from specbench.results import BASELINE, drafter_order

WIDE, NARROW = 7.0, 3.4
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000")
# Paul Tol's "muted" qualitative scheme (9 colours, distinct under the common colour-vision deficiencies)
# plus black as the tenth; neighbours in this order differ in lightness as well as hue.
PALETTE = ("#332288", "#DDCC77", "#117733", "#CC6677", "#88CCEE", "#882255", "#44AA99", "#999933", "#AA4499",
           "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", "*", ">")
HATCHES = ("", "////", "....", "xxxx", "\\\\", "oo", "++", "----", "||||", "**")
# Fixed slots for the built-in drafters, so a drafter keeps its colour in every report whichever others ran;
# medusa (indigo) and ctc-ce (wine) are far apart in hue and lightness. Other names take the free slots.
DRAFTER_SLOTS = ("ngram", "medusa", "hydra", "ctc", "eagle", "ctc-ce", "sps", "eagle3", "speculators")
VANILLA_GREY = "#7F7F7F"
STAGE_COLOURS = {"verify": "#0072B2", "draft": "#E69F00", "transform": "#009E73", "accept": "#CC79A7",
                 "other": "#BBBBBB"}  # Okabe-Ito; the same stages and colours in both breakdown charts
RUN_MARKERS = ("o", "s", "^", "D", "v", "P")
STYLE = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
    "legend.fontsize": 7, "legend.frameon": False, "axes.spines.top": False, "axes.spines.right": False,
    "axes.linewidth": 0.6, "xtick.major.width": 0.6, "ytick.major.width": 0.6, "lines.linewidth": 1.2,
    "hatch.linewidth": 0.5,
    "svg.fonttype": "none", "svg.hashsalt": "specbench", "pdf.fonttype": 42, "figure.dpi": 100, "savefig.bbox": "tight",
    "savefig.pad_inches": 0.03,
}


@contextmanager
def style() -> Iterator[None]:
    with matplotlib.rc_context(STYLE):
        yield


def styled(function: Callable[..., Figure | None]) -> Callable[..., Figure | None]:
    """Build the figure under `STYLE` (font sizes are fixed when artists are created)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with style():
            return function(*args, **kwargs)

    return wrapper


def _base_name(drafter: str) -> str:
    """``medusa@4`` and ``medusa (typical, lossy)`` share medusa's slot."""
    return drafter.split(" (")[0].split("@")[0]


def drafter_slots(drafters: list[str]) -> dict[str, int]:
    """A palette index per drafter: a built-in name its fixed slot, others (and a second entry of one name,
    e.g. two budgets of medusa) the lowest free slot, wrapping after 10."""
    slots: dict[str, int] = {}
    others = [d for d in dict.fromkeys(drafter_order(drafters)) if d != BASELINE]
    for drafter in others:
        base = _base_name(drafter)
        if base in DRAFTER_SLOTS and DRAFTER_SLOTS.index(base) not in slots.values():
            slots[drafter] = DRAFTER_SLOTS.index(base)
    for drafter in others:
        if drafter not in slots:
            free = [i for i in range(len(PALETTE)) if i not in slots.values()]
            slots[drafter] = free[0] if free else len(slots) % len(PALETTE)
    return slots


def drafter_colours(drafters: list[str]) -> dict[str, str]:
    """A stable colour per drafter: vanilla grey, the others from `PALETTE` (see `drafter_slots`)."""
    colours = {d: PALETTE[i] for d, i in drafter_slots(drafters).items()}
    colours[BASELINE] = VANILLA_GREY
    return colours


def drafter_markers(drafters: list[str]) -> dict[str, str]:
    """A marker per drafter, the second cue beside colour (vanilla a circle)."""
    markers = {d: MARKERS[i] for d, i in drafter_slots(drafters).items()}
    markers[BASELINE] = "o"
    return markers


def drafter_hatches(drafters: list[str]) -> dict[str, str]:
    """A hatch per drafter for bars, the second cue beside colour (vanilla none)."""
    hatches = {d: HATCHES[i] for d, i in drafter_slots(drafters).items()}
    hatches[BASELINE] = ""
    return hatches


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)  # a renderer for layout checks and PNG output, without pyplot
    return fig


def _y_grid(ax) -> None:
    ax.set_axisbelow(True)
    ax.yaxis.grid(True, color="#E5E5E5", linewidth=0.5)


# ---- per category -------------------------------------------------------------------------------------------
def _n_label(values: list[float]) -> str:
    """``n=8``, or ``n=1-2`` when drafters differ."""
    ns = sorted({int(v) for v in values if not np.isnan(v)})
    return "n=?" if not ns else f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}-{ns[-1]}"


def _category_bars(summary: pd.DataFrame, column: str, ylabel: str, colours: dict[str, str],
                   whiskers: bool = False) -> Figure | None:
    """Grouped bars, drafters by category, ``overall`` set apart; each category's tick says its n (questions).
    With ``whiskers``, a 95% CI where n >= `MIN_CI_N`; below it no whisker, and the legend says so."""
    rows = summary[(summary["drafter"] != BASELINE) & ~summary["category"].str.startswith("turn ")]
    if rows.empty or rows[column].isna().all():
        return None
    drafters = drafter_order(rows["drafter"])
    hatches = drafter_hatches(list(colours))
    categories = [c for c in dict.fromkeys(rows["category"]) if c != OVERALL] + [OVERALL]
    x = np.arange(len(categories), dtype=float)
    x[-1] += 0.4  # a gap before "overall"
    width = 0.8 / len(drafters)
    fig = _figure(WIDE, 2.3)
    ax = fig.add_subplot()
    withheld = False
    tops = []
    for i, drafter in enumerate(drafters):
        mine = rows[rows["drafter"] == drafter].set_index("category").reindex(categories)
        values = mine[column].to_numpy(float)
        centres = x + (i - (len(drafters) - 1) / 2) * width
        bars = ax.bar(centres, values, width * 0.92, color=colours[drafter], label=drafter,
                      hatch=hatches.get(drafter, ""), edgecolor="white", linewidth=0)
        tops += list(values)
        if whiskers:
            shown = (mine["n_questions"].to_numpy(float) >= MIN_CI_N) & ~np.isnan(values)  # categories with a CI
            withheld |= bool((~shown & ~np.isnan(values)).any())
            low, high = mine["speedup_ci_low"].to_numpy(float), mine["speedup_ci_high"].to_numpy(float)
            if shown.any():
                ax.errorbar(centres[shown], values[shown], yerr=np.nan_to_num(
                    np.vstack([values[shown] - low[shown], high[shown] - values[shown]])), fmt="none", ecolor="black",
                    elinewidth=0.8, capsize=2, capthick=0.8)
                tops += list(high[shown])
        if not whiskers and len(drafters) <= 2:
            ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
    ax.axhline(1.0, color=VANILLA_GREY, linestyle="--", linewidth=0.8, label="vanilla (1.0)", zorder=0)
    ax.axvline(x[-2] + 0.7, color="#CCCCCC", linewidth=0.6)
    counts = [_n_label(list(rows.loc[rows["category"] == c, "n_questions"].astype(float))) for c in categories]
    ax.set_xticks(x, [f"{c}\n{n}" for c, n in zip(categories, counts)])
    ax.get_xticklabels()[-1].set_fontweight("bold")
    if sum(len(c) for c in categories) > 90:
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    ax.set_xlim(x[0] - 0.6, x[-1] + 0.6)
    ax.set_ylim(0, max(np.nanmax(tops), 1.0) * 1.15)
    ax.set_ylabel(ylabel)
    _y_grid(ax)
    handles, labels = ax.get_legend_handles_labels()
    if whiskers:
        handles.append(Line2D([], [], color="black", linewidth=0.8, marker="_", markersize=5))
        labels.append(f"95% CI (none where n<{MIN_CI_N})" if withheld else "95% CI")
    fig.legend(handles, labels, loc="outside upper center", ncols=min(len(labels), 6))
    return fig


@styled
def tau_by_category(summary: pd.DataFrame, colours: dict[str, str]) -> Figure | None:
    return _category_bars(summary, "tau", "τ (tokens per step)", colours)


@styled
def speedup_by_category(summary: pd.DataFrame, colours: dict[str, str]) -> Figure | None:
    return _category_bars(summary, "speedup", "speedup over vanilla", colours, whiskers=True)


# ---- latency breakdown ---------------------------------------------------------------------------------------
STAGE_TEXT = {"verify": "white", "draft": "black", "transform": "white", "accept": "black", "other": "black"}


def stage_shares(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Each drafter's share of decode time per stage (`STAGE_ORDER` columns), negatives clipped (``other`` can
    dip below 0 by timer rounding) and renormalised so every row sums to 1; index: drafter."""
    shares = breakdown.set_index("drafter")[[f"{s}_share" for s in STAGE_ORDER]].clip(lower=0)
    shares.columns = list(STAGE_ORDER)
    return shares.div(shares.sum(axis=1), axis=0)


@styled
def breakdown_shares(breakdown: pd.DataFrame) -> Figure:
    """One bar per drafter normalised to 100% of decode time, split into the same stages as `breakdown_bars`
    (accept + KV commit apart from other); shares of 8% or more printed on their segment."""
    drafters = list(breakdown["drafter"])[::-1]  # first drafter on top
    shares = stage_shares(breakdown).loc[drafters]
    fig = _figure(NARROW, 0.9 + 0.32 * len(drafters))
    ax = fig.add_subplot()
    left = np.zeros(len(drafters))
    for stage in STAGE_ORDER:
        values = 100 * shares[stage].to_numpy(float)
        ax.barh(drafters, values, left=left, color=STAGE_COLOURS[stage], label=STAGE_LABELS[stage], height=0.6,
                edgecolor="white", linewidth=0.4)
        for y, (start, value) in enumerate(zip(left, values)):
            if value >= 8:
                ax.text(start + value / 2, y, f"{value:.0f}%", ha="center", va="center", fontsize=6.5,
                        color=STAGE_TEXT[stage])
        left += values
    ax.set_xlim(0, 100)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_xlabel("share of decode time (%)")
    ax.spines["left"].set_visible(False)
    ax.tick_params(axis="y", length=0)
    fig.legend(loc="outside upper center", ncols=3, handlelength=1, columnspacing=1)
    return fig


@styled
def breakdown_bars(breakdown: pd.DataFrame) -> Figure:
    """Stacked horizontal bars: decode ms per token by stage, one bar per drafter."""
    drafters = list(breakdown["drafter"])[::-1]  # first drafter on top
    fig = _figure(NARROW, 0.9 + 0.32 * len(drafters))
    ax = fig.add_subplot()
    left = np.zeros(len(drafters))
    data = breakdown.set_index("drafter").loc[drafters]
    for stage in STAGE_ORDER:
        values = np.clip(data[f"{stage}_ms_per_token"].to_numpy(float), 0, None)
        ax.barh(drafters, values, left=left, color=STAGE_COLOURS[stage], label=STAGE_LABELS[stage], height=0.6,
                edgecolor="white", linewidth=0.4)
        left += values
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:.1f}", va="center", fontsize=7)
    ax.set_xlim(0, left.max() * 1.18)
    ax.set_xlabel("decode time per token (ms)")
    ax.spines["left"].set_visible(False)
    ax.tick_params(axis="y", length=0)
    fig.legend(loc="outside upper center", ncols=3, handlelength=1, columnspacing=1)
    return fig


# ---- acceptance --------------------------------------------------------------------------------------------
@styled
def acceptance_by_depth(acceptance: pd.DataFrame, colours: dict[str, str]) -> Figure:
    """Two panels over depth: P(≥ d | proposed d) and P(d | d-1), one line per drafter."""
    fig = _figure(WIDE, 2.2)
    markers = drafter_markers(list(colours))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, column, title in zip(axes, ("accepted", "accepted_given_previous"),
                                 ("accepted at depth ≥ d (steps proposing d)", "accepted at d, given d-1 accepted")):
        for drafter in drafter_order(acceptance["drafter"]):
            mine = acceptance[acceptance["drafter"] == drafter]
            ax.plot(mine["depth"], 100 * mine[column], marker=markers.get(drafter, "o"), markersize=3.5,
                    color=colours[drafter], label=drafter)
        ax.set_title(title)
        ax.set_xlabel("draft depth d")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_ylim(0, 105)
        _y_grid(ax)
    axes[0].set_ylabel("acceptance (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=len(labels))
    return fig


@styled
def accept_length_histogram(histogram: pd.DataFrame, colours: dict[str, str]) -> Figure:
    """Grouped bars: share of steps by accepted length, one colour per drafter."""
    drafters = drafter_order(histogram["drafter"])
    lengths = sorted(histogram["accepted_length"].unique())
    fig = _figure(WIDE if len(lengths) > 10 else NARROW, 2.3)
    ax = fig.add_subplot()
    width = 0.8 / len(drafters)
    hatches = drafter_hatches(list(colours))
    for i, drafter in enumerate(drafters):
        mine = histogram[histogram["drafter"] == drafter].set_index("accepted_length").reindex(lengths)
        ax.bar(np.arange(len(lengths)) + (i - (len(drafters) - 1) / 2) * width, 100 * mine["share"].fillna(0),
               width * 0.92, color=colours[drafter], label=drafter, hatch=hatches.get(drafter, ""), edgecolor="white",
               linewidth=0)
    ax.set_xticks(np.arange(len(lengths)), [str(n) for n in lengths])
    ax.set_xlabel("tokens emitted per step (accepted drafts + bonus)")
    ax.set_ylabel("share of steps (%)")
    _y_grid(ax)
    fig.legend(loc="outside upper center", ncols=len(drafters))
    return fig


# ---- across runs ------------------------------------------------------------------------------------------
@styled
def tau_vs_speedup(summaries: dict[str, pd.DataFrame], colours: dict[str, str]) -> Figure | None:
    """Each drafter's categories (small) and overall (large, with its 95% CI where n >= `MIN_CI_N`) in
    τ-speedup space; the line speedup = τ is what a drafter would reach if drafting and verifying a tree cost
    nothing. One run: drafters differ by marker as well as colour; several runs: runs differ by marker."""
    fig = _figure(NARROW, 3.2)
    ax = fig.add_subplot()
    drafter_marker = drafter_markers(list(colours))
    several = len(summaries) > 1
    values, overall_n = [], []
    for run_index, (label, summary) in enumerate(summaries.items()):
        rows = summary[~summary["category"].str.startswith("turn ") & summary["speedup"].notna()]
        for drafter in drafter_order(rows["drafter"]):
            marker = RUN_MARKERS[run_index % len(RUN_MARKERS)] if several else drafter_marker.get(drafter, "o")
            mine = rows[rows["drafter"] == drafter]
            overall = mine[mine["category"] == OVERALL]
            categories = mine[mine["category"] != OVERALL]
            if drafter != BASELINE:
                ax.scatter(categories["tau"], categories["speedup"], s=12, marker=marker, color=colours[drafter],
                           alpha=0.55, linewidths=0, zorder=2)
                overall_n += list(overall["n_questions"].astype(float))
            shown = (overall["n_questions"].astype(float) >= MIN_CI_N).to_numpy()
            error = np.where(shown, np.vstack([overall["speedup"] - overall["speedup_ci_low"],
                                               overall["speedup_ci_high"] - overall["speedup"]]), 0.0)
            ax.errorbar(overall["tau"], overall["speedup"], yerr=np.nan_to_num(error), fmt=marker, markersize=6,
                        color=colours[drafter], markeredgecolor="black", markeredgewidth=0.6, elinewidth=0.8,
                        capsize=2, zorder=3)
            values += [*mine["tau"], *mine["speedup"], *overall["speedup_ci_high"][shown]]
    if not values:
        return None
    top = np.nanmax(values) * 1.08
    low = min(0.9, np.nanmin(values) * 0.95)
    ax.plot([low, top], [low, top], linestyle="--", color=VANILLA_GREY, linewidth=0.8, zorder=1)
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_xlabel("τ (tokens per step)")
    ax.set_ylabel("speedup over vanilla")
    _y_grid(ax)
    drafters = drafter_order(d for s in summaries.values() for d in s["drafter"])
    handles = [Line2D([], [], marker="o" if several else drafter_marker.get(d, "o"), linestyle="", color=colours[d],
                      markeredgecolor="black", markeredgewidth=0.6, label=d) for d in drafters]
    handles.append(Line2D([], [], linestyle="--", color=VANILLA_GREY, label="speedup = τ"))
    if several:
        handles += [Line2D([], [], marker=RUN_MARKERS[i % len(RUN_MARKERS)], linestyle="", color="black", label=label)
                    for i, label in enumerate(summaries)]
    handles.append(Line2D([], [], marker="o", linestyle="", color="#999999", markersize=3.5, alpha=0.55,
                          label="per category"))
    n = _n_label(overall_n)
    ci = f"95% CI, {n}" if overall_n and min(overall_n) >= MIN_CI_N else f"{n}; no CI where n<{MIN_CI_N}"
    handles.append(Line2D([], [], color="black", linewidth=0.8, marker="_", markersize=5, label=f"overall ({ci})"))
    fig.legend(handles=handles, loc="outside upper center", ncols=2 if len(handles) <= 4 else 3, handlelength=1.5,
               columnspacing=1.0)
    return fig


# ---- tree budgets ------------------------------------------------------------------------------------------
def _budget_axis(ax, sizes: list[int]) -> None:
    """A log2 x axis labelled with the powers of two among ``sizes``, as integers."""
    ax.set_xscale("log", base=2)
    ticks = [n for n in sizes if n & (n - 1) == 0]
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


@styled
def batch_scaling(batches: pd.DataFrame, colours: dict[str, str]) -> Figure | None:
    """Throughput (left) and throughput over vanilla's at the same batch size (right) against batch size, one
    line per drafter (`tables.batch_table`'s data); None with fewer than two batch sizes."""
    sizes = sorted(int(b) for b in batches["batch_size"].unique())
    if len(sizes) < 2:
        return None
    fig = _figure(WIDE, 2.3)
    axes = fig.subplots(1, 2)
    markers = drafter_markers(list(colours))
    for drafter in drafter_order(batches["drafter"]):
        mine = batches[batches["drafter"] == drafter].sort_values("batch_size")
        style = {"color": colours.get(drafter, VANILLA_GREY), "marker": markers.get(drafter, "o"), "markersize": 3.5,
                 "label": drafter}
        axes[0].plot(mine["batch_size"], mine["throughput_tok_s"], **style)
        axes[1].plot(mine["batch_size"], mine["throughput_speedup"], **style)
    _finish_log2_pair(fig, axes, sizes, "batch size", ("tokens/s (all sequences)", "× vanilla (same batch size)"))
    return fig


def _finish_log2_pair(fig: Figure, axes, sizes: list[int], xlabel: str, ylabels: tuple[str, str]) -> None:
    """Two panels over a log2 axis of ``sizes``: labels, grid, the right panel's dashed 1.0 line (a ratio),
    and one legend above both from the left panel's lines."""
    for ax, label in zip(axes, ylabels):
        _budget_axis(ax, sizes)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        _y_grid(ax)
    axes[1].axhline(1.0, color=VANILLA_GREY, linestyle="--", linewidth=0.8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=len(labels))


@styled
def verify_cost(profile: dict) -> Figure | None:
    """The run's verify-cost profile: t_verify(n) / t_verify(1) by tree size, one line per tree shape."""
    sizes, ms = profile.get("sizes") or [], profile.get("ms") or {}
    if not sizes or not ms:
        return None
    fig = _figure(NARROW, 2.3)
    ax = fig.add_subplot()
    for (shape, values), colour in zip(ms.items(), OKABE_ITO):
        ax.plot(sizes, [v / values[0] for v in values], marker="o", markersize=3, color=colour, label=shape)
    _budget_axis(ax, sizes)
    ax.set_xlabel("tree nodes (root included)")
    ax.set_ylabel("verify time / 1-node verify")
    _y_grid(ax)
    fig.legend(loc="outside upper center", ncols=len(ms))
    return fig


@styled
def tau_by_budget(budgets: dict, colours: dict[str, str]) -> Figure | None:
    """Replayed τ (left) and predicted speedup (right) by budget per auto drafter; the chosen budget ringed."""
    curves = {d: c for d, c in budgets.items() if c.get("curve")}
    if not curves:
        return None
    fig = _figure(WIDE, 2.3)
    axes = fig.subplots(1, 2)
    for drafter in drafter_order(curves):
        choice = curves[drafter]
        budget = [p["budget"] for p in choice["curve"]]
        for ax, key in zip(axes, ("tau", "predicted_speedup")):
            values = [p[key] for p in choice["curve"]]
            ax.plot(budget, values, marker="o", markersize=3, color=colours.get(drafter, "black"), label=drafter)
            chosen = budget.index(choice["budget"])
            ax.scatter([budget[chosen]], [values[chosen]], s=60, facecolors="none", edgecolors="black", linewidths=0.8)
    budgets = sorted({p["budget"] for choice in curves.values() for p in choice["curve"]})
    _finish_log2_pair(fig, axes, budgets, "tree budget", ("τ (replayed, calibration set)", "predicted speedup"))
    return fig


@styled
def predicted_vs_measured(budgets: pd.DataFrame, colours: dict[str, str]) -> Figure | None:
    """Measured speedup (95% CI where n >= `MIN_CI_N`) against the prediction (its 95% interval from τ's sampling
    noise over the calibration questions, where recorded), calibration τ (filled) and run τ (open); the dashed
    line is measured = predicted, the band ±10%. The band and line lie below the markers
    (zorder), so every marker stays visible."""
    rows = budgets[budgets["predicted_speedup"].notna() & budgets["measured_speedup"].notna()]
    if rows.empty:
        return None
    fig = _figure(NARROW, 3.0)
    ax = fig.add_subplot()
    markers = drafter_markers(list(colours))
    for row in rows.itertuples():
        colour = colours.get(row.drafter, "black")
        n = getattr(row, "n_questions", np.nan)
        shown = not np.isnan(n) and n >= MIN_CI_N
        error = [[row.measured_speedup - row.ci_low], [row.ci_high - row.measured_speedup]] if shown else None
        n_text = "n=?" if np.isnan(n) else f"n={int(n)}" + ("" if shown else ", no CI")
        marker = markers.get(row.drafter, "o")
        noise = getattr(row, "predicted_relative_se", np.nan)  # the prediction's 95% interval: its τ's noise
        across = None if np.isnan(noise) else [[row.predicted_speedup * (1 - np.exp(-Z95 * noise))],
                                                [row.predicted_speedup * (np.exp(Z95 * noise) - 1)]]
        ax.errorbar([row.predicted_speedup], [row.measured_speedup], yerr=None if error is None else np.nan_to_num(error),
                    xerr=across,
                    fmt=marker, color=colour, markeredgecolor="black", markeredgewidth=0.6, elinewidth=0.8, capsize=2,
                    label=f"{row.drafter} ({row.budget}), {n_text}", zorder=3)
        ax.scatter([row.predicted_with_run_tau], [row.measured_speedup], s=24, marker=marker, facecolors="none",
                   edgecolors=colour, linewidths=0.9, zorder=4)
    spread = np.exp(Z95 * rows["predicted_relative_se"]) if "predicted_relative_se" in rows else np.nan
    values = [*rows["predicted_speedup"], *rows["predicted_with_run_tau"], *rows["ci_low"], *rows["ci_high"],
              *(rows["predicted_speedup"] * spread), *(rows["predicted_speedup"] / spread)]
    low, top = np.nanmin(values) * 0.93, np.nanmax(values) * 1.07
    line = np.array([low, top])
    ax.fill_between(line, line * 0.9, line * 1.1, color="#EEEEEE", linewidth=0, zorder=1, label="±10%")
    ax.plot(line, line, linestyle="--", color=VANILLA_GREY, linewidth=0.8, zorder=2)
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_xlabel("predicted speedup")
    ax.set_ylabel("measured speedup")
    ax.set_axisbelow(True)
    ax.yaxis.grid(True, color="#E5E5E5", linewidth=0.5, zorder=0)
    fig.legend(loc="outside upper center", ncols=2)
    return fig


# ---- output ----------------------------------------------------------------------------------------------
def save(fig: Figure, stem: Path, formats: list[str], dpi: int) -> list[Path]:
    """Write ``stem.<format>`` for each format; SVG keeps text as text, PDF embeds TrueType fonts."""
    paths = []
    with style():
        for extension in formats:
            path = stem.with_suffix(f".{extension}")
            metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(extension)  # reproducible files
            fig.savefig(path, dpi=dpi, metadata=metadata)
            paths.append(path)
    return paths


def png_bytes(fig: Figure, dpi: int) -> bytes:
    with style():
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
