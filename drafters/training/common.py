"""Plumbing every drafter's training shares: the cache check, the learning-rate schedule, resumable
per-epoch checkpoints (``<out>.epochN.pt`` next to the output stem), and the training loop of the drafters
that learn from whole samples (`train_on_samples`)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from specbench.errors import SpecbenchError
from specbench.model import TargetModel
from specbench.results import read_manifest


def checked_manifest(cache: Path, target: TargetModel) -> dict:
    """The cache's manifest, refusing a cache distilled from another target."""
    manifest = read_manifest(Path(cache))
    if manifest is None:
        raise SpecbenchError(f"{cache} is not a distillation cache; run `specbench distill` first")
    if manifest["target"]["sha256"] != target.handle.sha256:
        raise SpecbenchError(f"{cache} was distilled from {manifest['target']['name']}, not {target.name}")
    return manifest


TRAIN_DTYPES = ("float32", "bfloat16")


def training_vocabularies(cache: Path, target: TargetModel, train_vocab: int, ranking: torch.Tensor | None = None):
    """(ranking, train vocabulary, evaluation vocabulary) shared by every trainer.

    ranking IntTensor[V]: token ids by count in the cache (stored in the checkpoint for ``draft_vocab``),
    unless given (a warm start keeps its checkpoint's);
    the train vocabulary is the ``train_vocab`` most frequent tokens (None: all of them); held-out metrics
    are scored over it, or, without one, over the cut inference drafts over by default."""
    from specbench.drafters.draft_vocab import DEFAULT_DRAFT_VOCAB, DraftVocab, token_ranking

    ranking = token_ranking(Path(cache), target.config.vocab_size) if ranking is None else ranking
    train = DraftVocab(target.lm_head, ranking, train_vocab) if train_vocab else None
    return ranking, train, train or DraftVocab(target.lm_head, ranking, DEFAULT_DRAFT_VOCAB)


def autocast(device: torch.device, dtype: str):
    """The training forward's precision: float32 as is, or bf16 autocast (master weights stay float32)."""
    from contextlib import nullcontext

    if dtype == "float32":
        return nullcontext()
    if dtype != "bfloat16":
        raise SpecbenchError(f"training dtype must be one of {', '.join(TRAIN_DTYPES)}, got {dtype!r}")
    return torch.autocast(device.type, dtype=torch.bfloat16)


def freeze(target: TargetModel) -> None:
    for p in target.model.parameters():
        p.requires_grad_(False)


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_steps``, then cosine decay to 0 at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return 0.5 * (1 + math.cos(math.pi * (step - warmup_steps) / max(1, total_steps - warmup_steps)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class EpochCheckpoints:
    """``<stem>.epochN.pt`` files holding module, optimiser, scheduler, history and elapsed seconds."""

    def __init__(self, stem: Path, module: nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
        self.stem, self.module, self.optimizer, self.scheduler = Path(stem), module, optimizer, scheduler

    def path(self, epoch: int) -> Path:
        return self.stem.with_name(f"{self.stem.name}.epoch{epoch}.pt")

    def resume(self, epochs: int) -> tuple[int, list, float]:
        """Load the newest epoch checkpoint; returns (epochs done, history, seconds)."""
        for epoch in range(epochs, 0, -1):
            if self.path(epoch).exists():
                state = torch.load(self.path(epoch), weights_only=False)
                self.module.load_state_dict(state["module"])
                self.optimizer.load_state_dict(state["optimizer"])
                self.scheduler.load_state_dict(state["scheduler"])
                return epoch, state["history"], state["seconds"]
        return 0, [], 0.0

    def save(self, epoch: int, history: list, seconds: float) -> None:
        self.stem.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"module": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(), "history": history, "seconds": seconds}, self.path(epoch))


def train_on_samples(module: nn.Module, train: list, target: TargetModel, config,
                     sample_loss: Callable[[object, torch.Generator], torch.Tensor | None] | None = None,
                     progress: bool = True,
                     batch_losses: Callable[[list, torch.Generator], torch.Tensor | None] | None = None) -> tuple[list, float]:
    """The training loop of the drafters that learn from whole samples (ctc, ctc-ce, eagle).

    Per epoch, the samples are shuffled (seeded by ``config.seed`` + epoch), and ``config.samples_per_step``
    of them are accumulated into each AdamW step, under warm-up then cosine decay. Each epoch is
    checkpointed (``<out>.epochN.pt``), and a rerun resumes after the newest one.

    ``sample_loss(sample, generator)`` is the method's loss on one sample, or None to skip the sample. The
    generator is seeded per epoch, for the method's own random choices (anchor subsets, noise). A method
    that can batch passes ``batch_losses(samples, generator)`` instead: the losses [B'] of the step's
    samples that count (None: none does), from one forward; the step's gradient is the same. ``config``
    needs method, out, epochs, lr, weight_decay, warmup_steps, samples_per_step, seed and dtype.

    Returns (history, training seconds), the history holding one row per epoch.
    """
    import random

    from tqdm import tqdm

    optimizer = torch.optim.AdamW(module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(train) / config.samples_per_step)
    scheduler = warmup_cosine(optimizer, config.warmup_steps, steps_per_epoch * config.epochs)
    checkpoints = EpochCheckpoints(Path(config.out), module, optimizer, scheduler)
    first_epoch, history, seconds = checkpoints.resume(config.epochs)
    for epoch in range(first_epoch, config.epochs):
        began = time.perf_counter()
        module.train()
        order = list(range(len(train)))
        random.Random(config.seed + epoch).shuffle(order)
        generator = torch.Generator().manual_seed(config.seed + epoch)  # reproducible per epoch
        losses = []
        bar = tqdm(range(steps_per_epoch), desc=f"{config.method} epoch {epoch + 1}/{config.epochs}", disable=not progress)
        for step in bar:
            optimizer.zero_grad(set_to_none=True)
            batch = [train[i] for i in order[step * config.samples_per_step : (step + 1) * config.samples_per_step]]
            step_losses = []
            if batch_losses is not None:
                with autocast(target.device, config.dtype):
                    per_sample = batch_losses(batch, generator)  # [B'] or None
                if per_sample is not None:
                    (per_sample.sum() / len(batch)).backward()
                    step_losses = per_sample.detach().float().tolist()  # one host sync per step
            else:
                for sample in batch:
                    with autocast(target.device, config.dtype):
                        loss = sample_loss(sample, generator)
                    if loss is not None:
                        (loss / len(batch)).backward()
                        step_losses.append(loss.item())
            optimizer.step()
            scheduler.step()
            if step_losses:
                losses.append(sum(step_losses) / len(step_losses))
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
        seconds += time.perf_counter() - began
        tenth = max(1, len(losses) // 10)
        history.append({"epoch": epoch + 1, "train_loss": sum(losses) / max(1, len(losses)),
                        "first_tenth_loss": sum(losses[:tenth]) / tenth, "last_tenth_loss": sum(losses[-tenth:]) / tenth})
        checkpoints.save(epoch + 1, history, seconds)
    return history, seconds


def write_trained(stem: Path, module: nn.Module, ranking: torch.Tensor, target: TargetModel, config, manifest: dict,
                  data: dict, metrics: dict, history: list, seconds: float, **hyperparameters) -> dict:
    """Write a trained drafter's checkpoint (weights + the token ranking) and its recipe; returns the recipe.

    The recipe records the target, the cache (its prompts and distillation settings, plus ``data``: what
    was trained on), the config as hyper-parameters (``hyperparameters`` added), the parameter count,
    held-out ``metrics``, the per-epoch ``history`` and the training time."""
    from dataclasses import asdict

    from specbench.checkpoint import save_checkpoint, target_identity
    from specbench.drafters.draft_vocab import RANKING_KEY

    recipe = {
        "method": config.method,
        "target": target_identity(target.handle),
        "data": {"cache": str(config.cache), "prompts": manifest.get("prompts"), "distill_config": manifest.get("config")} | data,
        "hyperparameters": asdict(config) | {"cache": None, "out": None} | hyperparameters,
        "parameters": sum(p.numel() for p in module.parameters()),
        "metrics": metrics,
        "history": history,
        "training_seconds": seconds,
        "torch_threads": torch.get_num_threads(),
        "vocab_ranking": "token ids by count over the train split's prompts and responses (draft_vocab option)",
    }
    save_checkpoint(Path(stem), module.state_dict() | {RANKING_KEY: ranking}, recipe)
    return recipe


def sample_training_data(config, target: TargetModel, ranking: torch.Tensor | None = None
                         ) -> tuple[dict, torch.Tensor, object, object, list, list]:
    """What a sample-level trainer (ctc, ctc-ce, eagle) starts from: the checked cache manifest, the token
    ranking (``ranking``, a loaded checkpoint's, or the cache's counts), the train and evaluation vocabularies
    (`training_vocabularies`), and the train (cut to ``config.max_train_samples``) and held-out samples;
    seeds torch and freezes the target first."""
    from specbench.drafters.training.distill import iter_samples

    manifest = checked_manifest(Path(config.cache), target)
    torch.manual_seed(config.seed)
    freeze(target)
    ranking, vocab, eval_vocab = training_vocabularies(Path(config.cache), target, config.train_vocab, ranking)
    train = list(iter_samples(Path(config.cache), "train"))[: config.max_train_samples]
    heldout = list(iter_samples(Path(config.cache), "heldout"))
    return manifest, ranking, vocab, eval_vocab, train, heldout
