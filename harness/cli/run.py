"""``specbench run``, ``profile`` and ``replay``: the commands that decode. Their shared flags come from
`RunConfig`'s declarations (`harness.config`); only a command's own flags are declared here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specbench import progress
from specbench.errors import SpecbenchError
from specbench.harness.cli.common import (
    EXIT_INTERRUPTED,
    Command,
    add_out_file,
    add_progress_flag,
    check_out_file,
    tree_sizes,
)
from specbench.harness.config import TARGET, WORKLOAD, RunConfig
from specbench.harness.options import add_options, csv, given
from specbench.results import BASELINE

PROFILE_SIZES = "1,2,3,4,6,8,12,16,24,32,48,64"
REPLAY_BUDGETS = "1,2,3,4,6,8,12,16,24,32"


def run_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, RunConfig, explicit_only=True)  # under them: --config FILE, then --preset
    add_progress_flag(parser)


def cmd_run(args: argparse.Namespace) -> int:
    from specbench.harness.runner import Run
    from specbench.reports.summary import format_table, write_summary

    config = RunConfig.from_layers(given(args, RunConfig))
    run = Run(config, progress=not args.no_progress)
    try:
        out = run.execute()
    except KeyboardInterrupt:
        print(f"\nspecbench: interrupted; finished questions are kept in {config.out}; "
              f"continue with the same command plus --resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not run.is_main:  # torchrun: rank 0 merged the answers and writes the summary
        return 0
    summary = write_summary(out)
    print(format_table(summary))
    sub_runs = "".join(f", {out}/batch-{size}/answers/*.jsonl" for size in config.batch_sizes if size > 1)
    print(f"\nresults: {out}/answers/*.jsonl{sub_runs}, {out}/summary.csv, {out}/manifest.json")
    return 0


def profile_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, RunConfig, (*TARGET, "batch_size"))
    parser.add_argument("--sizes", default=PROFILE_SIZES, help="tree sizes to time, root included (at a batch size "
                        "above 1: the buckets trees pad to, up to the largest of these)")
    parser.add_argument("--shapes", type=csv, default=["chain", "bushy"], help="tree shapes: chain, bushy")
    parser.add_argument("--prefix", type=int, default=300, help="cached prefix length (tokens)")
    parser.add_argument("--repeats", type=int, default=7, help="timed forwards per size; the median is kept")
    parser.add_argument("--force", action="store_true", help="measure again even if this machine's profile is cached")
    add_out_file(parser, "--out-file", "also write the profile to this JSON file")
    add_progress_flag(parser)


def cmd_profile(args: argparse.Namespace) -> int:
    import torch

    from specbench.harness.autobudget.profile import (
        BATCH_SIZES,
        TREE_SHAPES,
        cache_path,
        implausible_note,
        load_profile,
        measure_and_cache,
        profile_key,
        save_profile,
    )
    from specbench.model import check_device, load_target
    from specbench.model_source import cache_root

    config = RunConfig(drafters=[BASELINE], **given(args, RunConfig))
    sizes = tree_sizes(args.sizes, "--sizes")
    unknown = [shape for shape in args.shapes if shape not in TREE_SHAPES]
    if unknown or not args.shapes:
        raise SpecbenchError(f"--shapes must be from {', '.join(TREE_SHAPES)}, got {','.join(args.shapes)}")
    for name in ("prefix", "repeats"):
        if getattr(args, name) < 1:
            raise SpecbenchError(f"--{name} must be at least 1")
    out_file = check_out_file(args.out_file, "--out-file")
    if config.threads:
        torch.set_num_threads(config.threads)
    check_device(config.device)
    target = load_target(config.model, config.device, config.dtype, config.device_map)
    target.use_regime(config.regime, backend=config.compile_backend)  # a compiled profile times the compiled tree steps
    if out_file and len(config.batch_sizes) > 1:
        raise SpecbenchError("--out-file writes one profile: give one --batch-size with it")
    for batch in config.batch_sizes:  # one profile per batch size (the batch axis), each cached on its own
        path = cache_path(profile_key(target, batch=batch), cache_root())
        if path.exists() and not args.force:
            profile = load_profile(path)
            print(f"cached profile {path} (measured {profile.measured}; --force measures again)", file=sys.stderr)
            note = implausible_note(profile, str(path))
            if note:
                print(note, file=sys.stderr)
        else:
            grid = sizes if batch == 1 else [n for n in BATCH_SIZES if n <= max(sizes)]
            with progress.enabled(not args.no_progress):
                profile, path = measure_and_cache(target, cache_root(), sizes=grid, shapes=args.shapes,
                                                  prefix=args.prefix, repeats=args.repeats, batch=batch)
            print(f"wrote {path}", file=sys.stderr)
        if out_file:
            save_profile(profile, out_file)
        key = profile.key
        print(f"{key['model']} on {key['device_name']} ({key['device']}, {key['dtype']}, {key['threads']} threads, "
              f"torch {key['torch']}); prefix {profile.prefix} tokens, median of {profile.repeats}"
              + (f"; batch size {batch} (each tree padded to its bucket)" if batch > 1 else ""))
        print(profile.table())
    return 0


def replay_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, RunConfig, (*WORKLOAD, "profile"))
    parser.add_argument("--budgets", default=REPLAY_BUDGETS, help="tree budgets to replay each drafter at")
    parser.add_argument("--by", choices=["category", "turn"], default="category",
                        help="group rows by question category (default) or by turn (turn 1, turn 2, ...)")
    add_out_file(parser, "--out-csv", "CSV file for the rows (default: print only)", dest="rows")
    add_progress_flag(parser)


def cmd_replay(args: argparse.Namespace) -> int:
    import torch

    from specbench.harness.autobudget.profile import resolve_profile
    from specbench.harness.autobudget.replay import sweep, with_predictions
    from specbench.harness.autobudget.spec import create_entry
    from specbench.harness.autobudget.trajectories import replay_trajectories
    from specbench.model import load_target
    from specbench.model_source import cache_root
    from specbench.prompts import PromptBuilder
    from specbench.questions import load_questions, resolve_bench, select_questions

    budgets = tree_sizes(args.budgets, "--budgets")
    check_out_file(args.rows, "--out-csv", "CSV file name")
    config = RunConfig(out=".", **given(args, RunConfig))
    config.check()  # the checks `run` makes, before the model loads
    questions = select_questions(load_questions(resolve_bench(config.bench)), config.categories, config.limit)
    drafters = {name: create_entry(name, config.drafter_options) for name in config.ordered_drafters()}
    if config.threads:
        torch.set_num_threads(config.threads)
    target = load_target(config.model, config.device, config.dtype, config.device_map)
    target.check_new_tokens(config.max_new_tokens)
    # replay runs the drafters; their draft cost is what it times
    target.use_regime(config.regime, backend=config.compile_backend)
    prompts = PromptBuilder(target.tokenizer, config.template)
    with progress.enabled(not args.no_progress):  # the greedy pass's bar, when it is not cached yet
        recorded, stored_at = replay_trajectories(target, prompts, questions, config.max_new_tokens, config.template,
                                                  cache_root())
    turns = [(q.category if args.by == "category" else f"turn {number}", t) for q, per_turn in zip(questions, recorded)
             for number, t in enumerate(per_turn, start=1)]
    table = sweep(target, drafters, turns, budgets, config.max_new_tokens, progress=not args.no_progress)
    profile, source = resolve_profile(config.profile, target)
    if profile is not None:
        table = with_predictions(table, profile)
    if args.rows:
        Path(args.rows).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.rows, index=False)
    overall = table[table.category == "overall"]
    print("replayed tau by tree budget (overall; greedy verification):")
    print(_by_budget(overall, "tau", list(drafters)))
    if profile is not None:
        print(f"\npredicted speedup by tree budget (verify-cost profile: {source}; loop overhead not included):")
        print(_by_budget(overall, "predicted_speedup", list(drafters)))
    print(f"trajectories: {stored_at}")
    if args.rows:
        print(f"rows: {args.rows}")
    return 0


def _by_budget(rows, column: str, drafters: list[str]) -> str:
    """One row per drafter, one column per budget."""
    table = rows.pivot(index="drafter", columns="budget", values=column).loc[drafters]
    return table.to_string(float_format=lambda v: f"{v:.2f}")


COMMANDS = [
    Command("run", "run drafters through the one decode loop; write answers, manifest, summary.csv",
            "specbench run --drafters vanilla,ngram,hydra --bench mt_bench --limit 2 --out runs/mt",
            run_arguments, cmd_run),
    Command("profile", "time one verification forward by tree size on this machine (cached; recorded in runs)",
            "specbench profile --model default --threads 2", profile_arguments, cmd_profile),
    Command("replay", "tau by tree budget for every drafter, replayed on recorded greedy trajectories (greedy only)",
            "specbench replay --drafters ngram,hydra --bench mt_bench --limit 2 --budgets 1,2,4,8,16",
            replay_arguments, cmd_replay),
]
