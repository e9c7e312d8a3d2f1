"""Assemble a report (tables + charts + run context) from loaded runs, and write it in the asked formats.

Layout of ``OUT``: ``report.md``, ``report.html`` (self-contained: CSS inline, charts embedded as PNG data),
``report.tex`` (booktabs tables, charts by ``\\includegraphics``), ``csv/<table>.csv`` (numbers, a ``run``
column when several runs are merged), ``charts/<name>.<png|pdf|svg>``. With several runs the per-run
charts are named ``<run>-<name>``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from specbench.errors import SpecbenchError
from specbench.reports import charts, render, tables
from specbench.reports.context import context_table
from specbench.reports.cost_model import cost_model_table
from specbench.reports.document import Chart, Report, Section
from specbench.reports.runs import RunResults
from specbench.reports.tables import Table

TABLE_FORMATS = ("md", "html", "tex", "csv")
CHART_FORMATS = ("png", "pdf", "svg")


def _run_section(run: RunResults, summary: pd.DataFrame, colours: dict[str, str], prefix: str) -> Section:
    section = Section(run.label)
    sampling = run.sampling
    if not sampling.greedy:
        section.notes.append(
            f"Sampled run: {sampling.label()}. "
            + ("Lossless: every drafter's output is distributed as sampling from the target alone, so ids are "
               "not compared with vanilla's (Equal to vanilla is empty)." if sampling.lossless else
               "LOSSY verification: drafters marked '(typical, lossy)' do not sample from the target's "
               "distribution; do not rank them with lossless results."))
    if run.missing:
        section.notes.append("incomplete run (reported with --allow-incomplete): " + "; ".join(
            f"{name} lacks {len(ids)} question(s)" for name, ids in run.missing.items()))
    category = tables.category_table(summary)
    section.tables += [category, tables.category_paper_table(category.data)]
    acceptance, histogram = tables.acceptance_table(run), tables.histogram_table(run)
    breakdown = tables.breakdown_table(run, summary)
    budgets = tables.budget_table(run, summary)
    cost = cost_model_table(run)  # auto's predicted step terms against the answers' stage times
    batches = tables.batch_table(run)  # a batch sweep's sub-runs (batch 1 is the rest of the section)
    section.tables += [t for t in (acceptance, histogram, breakdown, budgets, cost, batches) if t is not None]

    skipped: dict[str, list[str]] = {}  # reason -> chart names

    def add(name: str, title: str, figure: Figure | None, why_not: str) -> None:
        if figure is None:
            skipped.setdefault(why_not, []).append(name)
        else:
            section.charts.append(Chart(prefix + name, title, figure))

    no_drafter = "the run has no drafter besides vanilla"
    add("tau_by_category", "τ per category", charts.tau_by_category(category.data, colours), no_drafter)
    add("speedup_by_category", "Speedup per category (95% CI)", charts.speedup_by_category(category.data, colours),
        "no speedup (vanilla missing or no other drafter)")
    no_times = "no stage times (the run was recorded with --no-breakdown)"
    if breakdown is not None:
        untimed = sorted(set(summary["drafter"]) - set(breakdown.data["drafter"]))
        if untimed:
            section.notes.append(f"latency breakdown leaves out {', '.join(untimed)}: no stage times")
    add("breakdown_shares", "Where decode time goes (each bar 100% of a drafter's decode time)",
        None if breakdown is None else charts.breakdown_shares(breakdown.data), no_times)
    add("breakdown_bars", "Decode time per token by stage",
        None if breakdown is None else charts.breakdown_bars(breakdown.data), no_times)
    add("acceptance_by_depth", "Acceptance rate by depth",
        None if acceptance is None else charts.acceptance_by_depth(acceptance.data, colours),
        "no drafter proposed anything")
    add("accept_length_hist", "Accepted-length histogram",
        None if histogram is None else charts.accept_length_histogram(histogram.data, colours), no_drafter)
    manifest = run.manifest or {}
    no_budgets = "no budget was chosen by auto (a fixed --tree-budget, or a run before budgets were recorded)"
    add("verify_cost", "Verify cost by tree size (the run's profile)",
        charts.verify_cost(manifest["profile"]) if manifest.get("profile") else None, "the run recorded no profile")
    add("tau_by_budget", "τ and predicted speedup by tree budget (replayed; chosen budget ringed)",
        charts.tau_by_budget(manifest["budgets"], colours) if manifest.get("budgets") else None, no_budgets)
    add("predicted_vs_measured", "Predicted vs measured speedup (filled: calibration τ; open: run τ)",
        None if budgets is None else charts.predicted_vs_measured(budgets.data, colours), no_budgets)
    if batches is not None:
        add("batch_scaling", "Throughput and speedup by batch size",
            charts.batch_scaling(batches.data, colours), "a single batch size")
    section.notes += [f"chart{'s' if len(names) > 1 else ''} {', '.join(names)} skipped: {why}"
                      for why, names in skipped.items()]
    return section


def build_report(runs: list[RunResults]) -> Report:
    """Every table and chart for these runs (figures are built here, written by `write_report`)."""
    summaries = {run.label: tables.category_summary(run.answers) for run in runs}
    colours = charts.drafter_colours([d for s in summaries.values() for d in s["drafter"]])
    context = context_table(runs)
    overview = Section("Overview", [
        Table("context", "Run context", context, context, "From each run's manifest.json."),
        tables.paper_table(runs, summaries),
    ])
    overview.charts.append(Chart("tau_vs_speedup", "τ vs speedup (the dashed line: speedup = τ)",
                                 charts.tau_vs_speedup(summaries, colours)))
    if overview.charts[-1].figure is None:
        overview.charts.pop()
        overview.notes.append("chart tau_vs_speedup skipped: no speedup (vanilla missing)")
    sections = [overview]
    for run in runs:
        prefix = f"{run.slug}-" if len(runs) > 1 else ""
        sections.append(_run_section(run, summaries[run.label], colours, prefix))
    title = "specbench report: " + ", ".join(run.label for run in runs)
    return Report(title, sections)


def parse_formats(value: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    """``"md,html"`` -> ["md", "html"]; ``none`` or empty -> []; unknown names raise `SpecbenchError`."""
    names = [v.strip().lower() for v in value.split(",") if v.strip() and v.strip().lower() != "none"]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise SpecbenchError(f"{flag}: unknown format {', '.join(unknown)} (choose from {', '.join(allowed)})")
    return list(dict.fromkeys(names))


def write_report(report: Report, out: Path, formats: list[str], chart_formats: list[str], dpi: int = 200) -> list[Path]:
    """Write charts, then the tables in each format; return every path written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    images: dict[str, str] = {}  # chart name -> path relative to out (for md / tex)
    if chart_formats:
        (out / "charts").mkdir(exist_ok=True)
    for section in report.sections:
        for chart in section.charts:
            if chart_formats:
                paths = charts.save(chart.figure, out / "charts" / chart.name, chart_formats, dpi)
                written += paths
                images[chart.name] = paths[0].relative_to(out).as_posix()
    if "md" in formats:
        written.append(_write(out / "report.md", render.markdown(report, images)))
    if "html" in formats:
        pngs = {c.name: charts.png_bytes(c.figure, dpi) for s in report.sections for c in s.charts}
        written.append(_write(out / "report.html", render.html(report, pngs)))
    if "tex" in formats:
        written.append(_write(out / "report.tex", render.latex(report, images)))
    if "csv" in formats:
        written += render.write_csv(report, out / "csv")
    return written


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
