"""Plumbing every drafter's training shares: the cache check, the learning-rate schedule, and resumable
per-epoch checkpoints (``<out>.epochN.pt`` next to the output stem)."""

from __future__ import annotations

import math
from pathlib import Path

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


def training_vocabularies(cache: Path, target: TargetModel, train_vocab: int):
    """(ranking, train vocabulary, evaluation vocabulary) shared by every trainer.

    ranking IntTensor[V]: token ids by count in the cache (stored in the checkpoint for ``draft_vocab``);
    the train vocabulary is the ``train_vocab`` most frequent tokens (None: all of them); held-out metrics
    are scored over it, or, without one, over the cut inference drafts over by default."""
    from specbench.drafters.draft_vocab import DEFAULT_DRAFT_VOCAB, DraftVocab, token_ranking

    ranking = token_ranking(Path(cache), target.config.vocab_size)
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
