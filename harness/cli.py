"""The ``specbench`` command: ``run``, ``list-drafters``, ``report``.

Bad input prints one line, ``specbench: error: ...``, and exits with code 2; Ctrl-C keeps every
finished question and exits with code 130 (continue with ``--resume``).
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path

from specbench.errors import SpecbenchError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise SpecbenchError(message)


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _drafter_options(pairs: list[str]) -> dict[str, dict]:
    """``ngram.max_depth=6`` -> {"ngram": {"max_depth": 6}} (values parsed as Python literals when possible)."""
    options: dict[str, dict] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        drafter, dot, option = key.partition(".")
        if not (sep and dot and drafter and option):
            raise SpecbenchError(f"--drafter-option {pair!r}: expected DRAFTER.OPTION=VALUE")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        options.setdefault(drafter, {})[option] = value
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specbench", description="Benchmark speculative-decoding drafters on one shared verifier.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="generate answers with each drafter and record speed and acceptance")
    run.add_argument("--model", default="default", help="'default' (SmolLM2-135M-Instruct), a model directory or a .gguf file")
    run.add_argument("--drafters", type=_csv, default=["all"], help="comma-separated names, or 'all' (default)")
    run.add_argument("--bench", default="demo", help="demo (default), mt_bench, spec_bench, or a question.jsonl path")
    run.add_argument("--categories", type=_csv, default=None, help="comma-separated categories to keep")
    run.add_argument("--limit", type=int, default=None, help="at most N questions from each category")
    run.add_argument("--max-new-tokens", type=int, default=128)
    run.add_argument("--tree-budget", type=int, default=16, help="max draft-tree nodes per step, root included")
    run.add_argument("--repeats", type=int, default=1, help="time each turn N times, keep the median")
    run.add_argument("--breakdown", action="store_true", help="record per-stage times (a separate pass from headline timing)")
    run.add_argument("--out", default=None, help="output directory (default runs/<date-time>)")
    run.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    run.add_argument("--device", default="cpu", help="cpu or cuda")
    run.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    run.add_argument("--template", default=None, help="FastChat conversation template for models without a chat template")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    run.add_argument("--drafter-option", action="append", default=[], metavar="DRAFTER.OPTION=VALUE",
                     help="a drafter-specific option, e.g. ngram.max_depth=6 (repeatable)")
    run.add_argument("--no-warmup", action="store_true", help="skip the warm-up question")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    commands.add_parser("list-drafters", help="show every registered drafter and where it comes from")

    report = commands.add_parser("report", help="recompute summary.csv from a run's answer files and print it")
    report.add_argument("dirs", nargs="+", help="run directories")
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    from specbench.harness.runner import Run, RunConfig
    from specbench.registry import available_drafters
    from specbench.reports.summary import format_table, write_summary

    drafters = list(available_drafters()) if args.drafters == ["all"] else args.drafters
    config = RunConfig(
        out=args.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}", model=args.model, drafters=drafters,
        bench=args.bench, categories=args.categories, limit=args.limit, max_new_tokens=args.max_new_tokens,
        tree_budget=args.tree_budget, repeats=args.repeats, breakdown=args.breakdown, device=args.device,
        dtype=args.dtype, template=args.template, seed=args.seed, threads=args.threads, warmup=not args.no_warmup,
        resume=args.resume, drafter_options=_drafter_options(args.drafter_option),
    )
    unknown = sorted(set(config.drafter_options) - set(drafters))
    if unknown:
        raise SpecbenchError(f"--drafter-option names drafters not in --drafters: {', '.join(unknown)}")
    run = Run(config, progress=not args.no_progress)
    try:
        out = run.execute()
    except KeyboardInterrupt:
        print(f"\nspecbench: interrupted; finished questions are kept in {config.out}; "
              f"continue with the same command plus --resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    summary = write_summary(out)
    print(format_table(summary))
    print(f"\nresults: {out}/answers/*.jsonl, {out}/summary.csv, {out}/manifest.json")
    return 0


def cmd_list_drafters(args: argparse.Namespace) -> int:
    from specbench.registry import available_drafters

    for name, source in available_drafters().items():
        print(f"{name:16s} {source.target}  ({source.origin})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from specbench.reports.summary import format_table, write_summary

    for folder in args.dirs:
        if not Path(folder).is_dir():
            raise SpecbenchError(f"run directory not found: {folder}")
        print(f"== {folder}")
        print(format_table(write_summary(Path(folder))))
    return 0


COMMANDS = {"run": cmd_run, "list-drafters": cmd_list_drafters, "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except SpecbenchError as exc:
        print(f"specbench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
