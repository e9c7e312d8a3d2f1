"""``specbench report``, ``export`` and ``list-drafters``: the commands that read runs and the registry and
load no model."""

from __future__ import annotations

import argparse
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.harness.cli.common import Command, check_out_dir
from specbench.harness.options import csv


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", help="run directories; several are merged (e.g. two models), each "
                        "labelled by its manifest; they are only read (their summaries go to OUT/summary*.csv with csv)")
    parser.add_argument("--out", default=None, help="report folder (default DIR/report for one run; required for several)")
    parser.add_argument("--formats", default="md,html,tex,csv", help="table formats: md,html,tex,csv (default all)")
    parser.add_argument("--charts", default="png,pdf", help="chart formats: png,pdf,svg, or none (default png,pdf)")
    parser.add_argument("--dpi", type=int, default=200, help="PNG resolution (default 200)")
    parser.add_argument("--labels", type=csv, default=None, help="comma-separated run labels, one per DIR")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="report an interrupted run (questions missing for some drafter) instead of refusing")


def cmd_report(args: argparse.Namespace) -> int:
    from specbench.reports.report import CHART_FORMATS, TABLE_FORMATS, build_report, parse_formats, write_report
    from specbench.reports.runs import load_runs
    from specbench.reports.summary import format_table, summarize
    from specbench.results import SUMMARY, load_run

    formats = parse_formats(args.formats, TABLE_FORMATS, "--formats")
    chart_formats = parse_formats(args.charts, CHART_FORMATS, "--charts")
    if args.dpi < 50:
        raise SpecbenchError(f"--dpi must be at least 50, got {args.dpi}")
    if args.out is None and len(args.dirs) > 1:
        raise SpecbenchError("a report of several runs needs --out")
    check_out_dir(args.out)
    runs = load_runs([Path(folder) for folder in args.dirs], args.labels, args.allow_incomplete)
    summaries = []
    for run in runs:  # the run's summary.csv rows, recomputed from its answers; the run itself is not written to
        summaries.append(summarize(load_run(run.path)))
        print(f"== {run.path} ({run.label})")
        print(format_table(summaries[-1]))
    out = Path(args.out) if args.out else Path(args.dirs[0]) / "report"
    report = build_report(runs)
    written = write_report(report, out, formats, chart_formats, args.dpi)
    for run, summary in zip(runs, summaries if "csv" in formats else []):  # OUT/summary.csv; OUT/summary-<label>.csv each
        path = out / (SUMMARY if len(runs) == 1 else f"{Path(SUMMARY).stem}-{run.slug}.csv")
        summary.to_csv(path, index=False, float_format="%.6g")
        written.append(path)
    for note in report.notes:
        print(f"note: {note}")
    print(f"\nreport: {len(written)} files in {out}: " + ", ".join(p.relative_to(out).as_posix() for p in written
                                                                 if p.parent == out or p.suffix == ".png"))
    return 0


def export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="a run directory (specbench run --out)")
    parser.add_argument("--format", default="spec-bench", choices=["spec-bench"], help="the layout to write")
    parser.add_argument("--out", required=True,
                        help="folder playing Spec-Bench's data/ (files go to OUT/<bench>/model_answer/)")
    parser.add_argument("--drafters", type=csv, default=None, help="comma-separated drafters (default: all in the run)")
    parser.add_argument("--model-name", default=None,
                        help="the <model> part of Spec-Bench's model ids (default: the run's model)")
    parser.add_argument("--unpaired", action="store_true",
                        help="keep questions some exported drafter lacks (speed.py averages each file on its own)")
    parser.add_argument("--tokenizer", action="store_true",
                        help="also print the tokenizer folder to give speed.py (converts a GGUF model once, ~15 s)")


def cmd_export(args: argparse.Namespace) -> int:
    from specbench.reports.export import export_spec_bench, spec_bench_tokenizer

    check_out_dir(args.out)
    paths = export_spec_bench(args.run, args.out, args.drafters, model=args.model_name, paired=not args.unpaired)
    for path in paths:
        print(path)
    if args.tokenizer:
        print(f"tokenizer for speed.py: {spec_bench_tokenizer(args.run)}")
    return 0


def cmd_list_drafters(args: argparse.Namespace) -> int:
    from specbench.registry import available_drafters

    for name, source in available_drafters().items():
        print(f"{name:16s} {source.target}  ({source.origin})")
    return 0


COMMANDS = [
    Command("report", "tables (md, html, tex, csv) and charts from run directories (loads no model)",
            "specbench report runs/mt", report_arguments, cmd_report),
    Command("export", "write a run's answers in another tool's layout (Spec-Bench)",
            "specbench export runs/mt --format spec-bench --out specbench-export", export_arguments, cmd_export),
    Command("list-drafters", "every registered drafter and where it comes from", "specbench list-drafters",
            lambda parser: None, cmd_list_drafters),
]
