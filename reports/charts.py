"""Paper-ready charts (matplotlib, no pyplot state) from the numbers of `reports.tables`.

Sizes follow a two-column paper: ``WIDE`` figures span both columns (7 in), ``NARROW`` ones fit one
(3.4 in); text is 7-8 pt at that size, so it stays legible when placed at 100%. Colours come from the
Okabe-Ito palette (safe for the common colour-vision deficiencies); vanilla is grey. Every function
returns a `Figure`, or None when the run holds nothing to draw (the caller notes why).
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

from specbench.reports.summary import OVERALL
from specbench.reports.tables import STAGE_LABELS, STAGE_ORDER
from specbench.results import BASELINE, drafter_order

WIDE, NARROW = 7.0, 3.4
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000")
VANILLA_GREY = "#7F7F7F"
STAGE_COLOURS = {"verify": "#0072B2", "draft": "#E69F00", "transform": "#009E73", "accept": "#CC79A7",
                 "other": "#BBBBBB"}
RUN_MARKERS = ("o", "s", "^", "D", "v", "P")
STYLE = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
    "legend.fontsize": 7, "legend.frameon": False, "axes.spines.top": False, "axes.spines.right": False,
    "axes.linewidth": 0.6, "xtick.major.width": 0.6, "ytick.major.width": 0.6, "lines.linewidth": 1.2,
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


def drafter_colours(drafters: list[str]) -> dict[str, str]:
    """A stable colour per drafter: vanilla grey, the others in palette order."""
    others = [d for d in drafter_order(drafters) if d != BASELINE]
    colours = {d: OKABE_ITO[i % len(OKABE_ITO)] for i, d in enumerate(others)}
    colours[BASELINE] = VANILLA_GREY
    return colours


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)  # a renderer for layout checks and PNG output, without pyplot
    return fig


def _y_grid(ax) -> None:
    ax.set_axisbelow(True)
    ax.yaxis.grid(True, color="#E5E5E5", linewidth=0.5)


# ---- per category -------------------------------------------------------------------------------------------
def _category_bars(summary: pd.DataFrame, column: str, ylabel: str, colours: dict[str, str],
                   whiskers: bool = False) -> Figure | None:
    rows = summary[(summary["drafter"] != BASELINE) & ~summary["category"].str.startswith("turn ")]
    if rows.empty or rows[column].isna().all():
        return None
    drafters = drafter_order(rows["drafter"])
    categories = [c for c in dict.fromkeys(rows["category"]) if c != OVERALL] + [OVERALL]
    x = np.arange(len(categories), dtype=float)
    x[-1] += 0.4  # a gap before "overall"
    width = 0.8 / len(drafters)
    fig = _figure(WIDE, 2.3)
    ax = fig.add_subplot()
    for i, drafter in enumerate(drafters):
        mine = rows[rows["drafter"] == drafter].set_index("category").reindex(categories)
        values = mine[column].to_numpy(float)
        error = None
        if whiskers:
            error = np.vstack([values - mine["speedup_ci_low"].to_numpy(float),
                               mine["speedup_ci_high"].to_numpy(float) - values])
        bars = ax.bar(x + (i - (len(drafters) - 1) / 2) * width, values, width * 0.92, color=colours[drafter],
                      label=drafter, yerr=error, error_kw={"elinewidth": 0.8, "capsize": 2, "capthick": 0.8})
        if not whiskers and len(drafters) <= 2:
            ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
    ax.axhline(1.0, color=VANILLA_GREY, linestyle="--", linewidth=0.8, label="vanilla (1.0)", zorder=0)
    ax.axvline(x[-2] + 0.7, color="#CCCCCC", linewidth=0.6)
    ax.set_xticks(x, categories)
    ax.get_xticklabels()[-1].set_fontweight("bold")
    if sum(len(c) for c in categories) > 90:
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    ax.set_xlim(x[0] - 0.6, x[-1] + 0.6)
    top = np.nanmax(rows["speedup_ci_high"] if whiskers else rows[column])
    ax.set_ylim(0, max(top, 1.0) * 1.15)
    ax.set_ylabel(ylabel)
    _y_grid(ax)
    fig.legend(loc="outside upper center", ncols=len(drafters) + 1)
    return fig


@styled
def tau_by_category(summary: pd.DataFrame, colours: dict[str, str]) -> Figure | None:
    return _category_bars(summary, "tau", "τ (tokens per step)", colours)


@styled
def speedup_by_category(summary: pd.DataFrame, colours: dict[str, str]) -> Figure | None:
    return _category_bars(summary, "speedup", "speedup over vanilla", colours, whiskers=True)


# ---- latency breakdown ---------------------------------------------------------------------------------------
PIE_PARTS = {"verify": ("verify",), "draft": ("draft",), "transform": ("transform",), "other": ("accept", "other")}
PIE_LABELS = {"verify": "target forward", "draft": "draft module", "transform": "transform", "other": "other"}
PIE_WIDTH = WIDE / 4
PIE_TEXT = {"verify": "white", "draft": "black", "transform": "white", "other": "black"}


@styled
def breakdown_pies(breakdown: pd.DataFrame) -> Figure:
    """One pie per drafter: the paper's four parts of decode time (accept, i.e. compare + KV commit, folded into
    other), each with its own legend of percentages."""
    n = len(breakdown)
    cols = 3 if n in (5, 6) else min(n, 4)  # full rows where possible, 4 per row at most
    rows = -(-n // cols)
    fig = _figure(max(NARROW, PIE_WIDTH * cols), 2.6 * rows)
    # Each cell is a pie above its own legend's axes, so the layout engine keeps a legend clear of the
    # next row's titles (a legend hung below a pie's axes overlapped them).
    cells = fig.add_gridspec(rows, cols)
    for i, (_, row) in enumerate(breakdown.iterrows()):
        cell = cells[i // cols, i % cols].subgridspec(2, 1, height_ratios=[1.0, 0.5], hspace=0.0)
        ax, legend_ax = fig.add_subplot(cell[0]), fig.add_subplot(cell[1])
        legend_ax.axis("off")
        shares = [sum(max(row[f"{s}_share"], 0.0) for s in parts) for parts in PIE_PARTS.values()]
        wedges, _ = ax.pie(shares, colors=[STAGE_COLOURS[p] for p in PIE_PARTS], startangle=90, counterclock=False,
                           wedgeprops={"linewidth": 0.8, "edgecolor": "white"})
        for wedge, share, part in zip(wedges, shares, PIE_PARTS):
            if share >= 0.1:
                angle = np.deg2rad((wedge.theta1 + wedge.theta2) / 2)
                ax.text(0.62 * np.cos(angle), 0.62 * np.sin(angle), f"{100 * share:.0f}%", ha="center",
                        va="center", fontsize=7, color=PIE_TEXT[part])
        ax.set_title(f"{row['drafter']}\n{row['decode_ms_per_token']:.1f} ms/token", pad=2)
        legend_ax.legend(wedges, [f"{PIE_LABELS[p]} {100 * s:.1f}%" for p, s in zip(PIE_PARTS, shares)],
                         loc="upper center", fontsize=6.5, handlelength=1, borderaxespad=0, frameon=False)
        ax.set_aspect("equal")
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
    axes = fig.subplots(1, 2, sharey=True)
    for ax, column, title in zip(axes, ("accepted", "accepted_given_previous"),
                                 ("accepted at depth ≥ d (steps proposing d)", "accepted at d, given d-1 accepted")):
        for drafter in drafter_order(acceptance["drafter"]):
            mine = acceptance[acceptance["drafter"] == drafter]
            ax.plot(mine["depth"], 100 * mine[column], marker="o", markersize=3, color=colours[drafter], label=drafter)
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
    for i, drafter in enumerate(drafters):
        mine = histogram[histogram["drafter"] == drafter].set_index("accepted_length").reindex(lengths)
        ax.bar(np.arange(len(lengths)) + (i - (len(drafters) - 1) / 2) * width, 100 * mine["share"].fillna(0),
               width * 0.92, color=colours[drafter], label=drafter)
    ax.set_xticks(np.arange(len(lengths)), [str(n) for n in lengths])
    ax.set_xlabel("tokens emitted per step (accepted drafts + bonus)")
    ax.set_ylabel("share of steps (%)")
    _y_grid(ax)
    fig.legend(loc="outside upper center", ncols=len(drafters))
    return fig


# ---- across runs ------------------------------------------------------------------------------------------
@styled
def tau_vs_speedup(summaries: dict[str, pd.DataFrame], colours: dict[str, str]) -> Figure | None:
    """Each drafter's categories (small) and overall (large, with CI) in τ-speedup space; the line speedup = τ
    is what a drafter would reach if drafting and verifying a tree cost nothing. Runs differ by marker."""
    fig = _figure(NARROW, 3.2)
    ax = fig.add_subplot()
    values = []
    for run_index, (label, summary) in enumerate(summaries.items()):
        marker = RUN_MARKERS[run_index % len(RUN_MARKERS)]
        rows = summary[~summary["category"].str.startswith("turn ") & summary["speedup"].notna()]
        for drafter in drafter_order(rows["drafter"]):
            mine = rows[rows["drafter"] == drafter]
            overall = mine[mine["category"] == OVERALL]
            categories = mine[mine["category"] != OVERALL]
            if drafter != BASELINE:
                ax.scatter(categories["tau"], categories["speedup"], s=12, marker=marker, color=colours[drafter],
                           alpha=0.55, linewidths=0)
            error = np.vstack([overall["speedup"] - overall["speedup_ci_low"],
                               overall["speedup_ci_high"] - overall["speedup"]])
            ax.errorbar(overall["tau"], overall["speedup"], yerr=np.nan_to_num(error), fmt=marker, markersize=6,
                        color=colours[drafter], markeredgecolor="black", markeredgewidth=0.6, elinewidth=0.8,
                        capsize=2)
            values += [*mine["tau"], *mine["speedup"], *overall["speedup_ci_high"]]
    if not values:
        return None
    top = np.nanmax(values) * 1.08
    low = min(0.9, np.nanmin(values) * 0.95)
    ax.plot([low, top], [low, top], linestyle="--", color=VANILLA_GREY, linewidth=0.8)
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_xlabel("τ (tokens per step)")
    ax.set_ylabel("speedup over vanilla")
    _y_grid(ax)
    drafters = drafter_order(d for s in summaries.values() for d in s["drafter"])
    handles = [Line2D([], [], marker="o", linestyle="", color=colours[d], markeredgecolor="black",
                      markeredgewidth=0.6, label=d) for d in drafters]
    handles.append(Line2D([], [], linestyle="--", color=VANILLA_GREY, label="speedup = τ"))
    if len(summaries) > 1:
        handles += [Line2D([], [], marker=RUN_MARKERS[i % len(RUN_MARKERS)], linestyle="", color="black", label=label)
                    for i, label in enumerate(summaries)]
    handles.append(Line2D([], [], marker="o", linestyle="", color="#999999", markersize=3.5, alpha=0.55,
                          label="per category"))
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
    for ax, label in zip(axes, ("τ (replayed, calibration set)", "predicted speedup")):
        _budget_axis(ax, budgets)
        ax.set_xlabel("tree budget")
        ax.set_ylabel(label)
        _y_grid(ax)
    axes[1].axhline(1.0, color=VANILLA_GREY, linestyle="--", linewidth=0.8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=len(labels))
    return fig


@styled
def predicted_vs_measured(budgets: pd.DataFrame, colours: dict[str, str]) -> Figure | None:
    """Measured speedup (95% CI) against the prediction, calibration τ (filled) and run τ (open); the
    dashed line is measured = predicted, the band ±10%."""
    rows = budgets[budgets["predicted_speedup"].notna() & budgets["measured_speedup"].notna()]
    if rows.empty:
        return None
    fig = _figure(NARROW, 3.0)
    ax = fig.add_subplot()
    for row in rows.itertuples():
        colour = colours.get(row.drafter, "black")
        error = [[row.measured_speedup - row.ci_low], [row.ci_high - row.measured_speedup]]
        ax.errorbar([row.predicted_speedup], [row.measured_speedup], yerr=np.nan_to_num(error), fmt="o",
                    color=colour, markeredgecolor="black", markeredgewidth=0.6, elinewidth=0.8, capsize=2,
                    label=f"{row.drafter} ({row.budget})")
        ax.scatter([row.predicted_with_run_tau], [row.measured_speedup], s=24, facecolors="none", edgecolors=colour)
    values = [*rows["predicted_speedup"], *rows["predicted_with_run_tau"], *rows["ci_low"], *rows["ci_high"]]
    low, top = np.nanmin(values) * 0.93, np.nanmax(values) * 1.07
    line = np.array([low, top])
    ax.plot(line, line, linestyle="--", color=VANILLA_GREY, linewidth=0.8)
    ax.fill_between(line, line * 0.9, line * 1.1, color="#EEEEEE", linewidth=0)
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_xlabel("predicted speedup")
    ax.set_ylabel("measured speedup")
    _y_grid(ax)
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
