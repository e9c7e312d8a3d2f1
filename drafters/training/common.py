"""Plumbing every drafter's training shares: the training configs' common fields and their checks
(`TrainConfig`), the cache check, the learning-rate schedule, resumable per-epoch checkpoints
(``<out>.epochN.pt`` next to the output stem), and the one training loop (`train_loop`).

Every method trains through `train_loop`; what differs between methods is behind its seam, an
`EpochBatches`: the batches of an epoch (whole samples for ctc, ctc-ce and eagle, `SampleBatches`; positions
for medusa and hydra, ``heads.HeadBatches``) and the loss of one batch. The loop owns the rest: the AdamW
optimiser and its steps, the warm-up-cosine schedule, autocast, the per-epoch checkpoints and resuming,
the progress bar and the per-epoch history.
"""

from __future__ import annotations

import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from specbench.errors import SpecbenchError
from specbench.model import TargetModel
from specbench.results import read_manifest

TRAIN_DTYPES = ("float32", "bfloat16")


def flag(field: str) -> str:
    """The command-line flag of a config field (``train_vocab`` -> ``--train-vocab``), for messages."""
    return "--" + field.replace("_", "-")


@dataclass(kw_only=True)
class TrainConfig:
    """The fields every method's training config shares, and their checks.

    Each method's config (``HeadTrainConfig``, ``CTCTrainConfig``, ``EagleTrainConfig``) adds its own fields
    and checks; its trainer calls `validate` first, and so can the command line, which then needs no checks
    of its own. The recipe of a trained checkpoint records every field (``hyperparameters``)."""

    method: str
    cache: str  # the distillation cache (`specbench distill`)
    out: str  # checkpoint stem: writes <out>.safetensors and <out>.json, and <out>.epochN.pt per epoch
    epochs: int = 4
    lr: float = 1e-3  # AdamW's peak learning rate
    weight_decay: float = 0.0
    warmup_steps: int = 50  # linear warm-up, then cosine decay to 0 (`warmup_cosine`)
    seed: int = 0  # initialisation and data order
    dtype: str = "float32"  # "bfloat16": autocast forward (CUDA), float32 master weights
    train_vocab: int = 0  # > 0: score only the N most frequent tokens in training
    checkpoint_steps: int = 500  # also checkpoint every N optimiser steps within an epoch (<out>.partial.pt); 0: never
    init_from: str | None = None  # a trained checkpoint (stem) of the same method to go on from (`load_warm_start`)

    def validate(self) -> None:
        """Refuse settings training cannot use, with a one-line `SpecbenchError` naming the flag."""
        at_least(self, 1, "epochs")
        at_least(self, 0, "lr", "weight_decay", "warmup_steps", "checkpoint_steps")
        if self.dtype not in TRAIN_DTYPES:
            raise SpecbenchError(f"--dtype must be one of {', '.join(TRAIN_DTYPES)}, not {self.dtype!r}")
        if not self.train_vocab >= 0:
            raise SpecbenchError("--train-vocab must be 0 (all tokens) or a token count")


@dataclass(kw_only=True)
class SampleTrainConfig(TrainConfig):
    """The fields of the methods that learn from whole samples (ctc, ctc-ce, eagle; `SampleBatches`)."""

    samples_per_step: int = 4  # samples accumulated into each optimiser step
    max_train_samples: int | None = None  # train on the first N samples of the cache's train split

    def validate(self) -> None:
        super().validate()
        at_least(self, 1, "samples_per_step")
        at_least(self, 1, "max_train_samples", optional=True)


def at_least(config: TrainConfig, low: float, *fields: str, optional: bool = False) -> None:
    """Refuse any of ``fields`` below ``low`` (or not a number: NaN fails too); None passes when ``optional``."""
    for field in fields:
        value = getattr(config, field)
        if value is None and optional:
            continue
        if not (isinstance(value, (int, float)) and value >= low):
            bound = "at least 1" if low == 1 else "0 or more" if low == 0 else f"at least {low}"
            raise SpecbenchError(f"{flag(field)} must be {bound}, not {value!r}")


def checked_manifest(cache: Path, target: TargetModel) -> dict:
    """The cache's manifest, refusing a cache distilled from another target."""
    manifest = read_manifest(Path(cache))
    if manifest is None:
        raise SpecbenchError(f"{cache} is not a distillation cache; run `specbench distill` first")
    if manifest["target"]["sha256"] != target.handle.sha256:
        raise SpecbenchError(f"{cache} was distilled from {manifest['target']['name']}, not {target.name}")
    return manifest


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
    """``<stem>.epochN.pt`` files holding module, optimiser, scheduler, history, elapsed seconds and the batches'
    own state (`EpochBatches.state`), and ``<stem>.partial.pt``: the same within an epoch, plus the steps done and
    their records, so a run stopped mid-epoch loses at most ``checkpoint_steps`` steps."""

    def __init__(self, stem: Path, module: nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
        self.stem, self.module, self.optimizer, self.scheduler = Path(stem), module, optimizer, scheduler

    def path(self, epoch: int) -> Path:
        return self.stem.with_name(f"{self.stem.name}.epoch{epoch}.pt")

    @property
    def partial(self) -> Path:
        return self.stem.with_name(f"{self.stem.name}.partial.pt")

    def resume(self, epochs: int, data: EpochBatches) -> tuple[int, list, float, int, list]:
        """Load the newest checkpoint: the partial one when it is past the newest epoch's. Returns (epochs done,
        history, seconds, steps done in the next epoch, their records) and restores ``data``'s state."""
        done = next((epoch for epoch in range(epochs, 0, -1) if self.path(epoch).exists()), 0)
        state = torch.load(self.path(done), weights_only=False) if done else None
        if self.partial.exists():
            partial = torch.load(self.partial, weights_only=False)
            if partial["epoch"] == done and partial["epoch"] < epochs:
                state = partial
        if state is None:
            return 0, [], 0.0, 0, []
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        data.load_state(state.get("batches", {}))
        return done, state["history"], state["seconds"], state.get("steps", 0), state.get("records", [])

    def save(self, epoch: int, history: list, seconds: float, data: EpochBatches) -> None:
        """Checkpoint the end of epoch ``epoch`` (1-based); the partial checkpoint within it is dropped."""
        self._write(self.path(epoch), history, seconds, data)
        self.partial.unlink(missing_ok=True)

    def save_partial(self, epoch: int, steps: int, records: list, history: list, seconds: float,
                     data: EpochBatches) -> None:
        """Checkpoint ``steps`` steps into epoch ``epoch`` (0-based: the epochs done before it)."""
        self._write(self.partial, history, seconds, data, epoch=epoch, steps=steps, records=records)

    def _write(self, path: Path, history: list, seconds: float, data: EpochBatches, **within: Any) -> None:
        self.stem.parent.mkdir(parents=True, exist_ok=True)
        state = {"module": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "history": history, "seconds": seconds,
                 "batches": data.state()} | within
        torch.save(state, path.with_name(path.name + ".tmp"))
        path.with_name(path.name + ".tmp").replace(path)  # whole or not at all: a kill mid-write keeps the last one


class StepLoss(NamedTuple):
    """One part of an optimiser step's loss, as a method computes it for `train_loop`."""

    loss: torch.Tensor  # scalar, scaled so that the parts of a step add up to the step's loss; back-propagated
    record: torch.Tensor  # [R] the numbers the epoch's history keeps of this part (per-sample or per-head losses)


class EpochBatches(ABC):
    """The seam between a training method and `train_loop`: what each epoch feeds the optimiser, and the
    loss of one step's batch. Everything else (optimiser, schedule, autocast, checkpoints, resume,
    progress) is the loop's, so every method trains the same way.

    ``steps`` is the number of optimiser steps per epoch (it sizes the learning-rate schedule)."""

    steps: int

    @abstractmethod
    def batches(self, epoch: int) -> Iterable[Any]:
        """The batches of epoch ``epoch`` (0-based), one per optimiser step, in order. Seeded, and a
        function of ``epoch`` alone, so a run resumed after epoch N sees what an uninterrupted one would."""

    @abstractmethod
    def losses(self, batch: Any) -> list[Callable[[], StepLoss | None]]:
        """The parts of ``batch``'s loss. This call runs outside autocast (input preparation); each part runs
        under the loop's autocast and is back-propagated before the next (a part per sample keeps one
        sample's graph alive at a time) and gives None when it has nothing to learn from."""

    @abstractmethod
    def history(self, records: list[list[float]]) -> dict:
        """The epoch's history row (besides its number) from each step's records (the parts' concatenated)."""

    def state(self) -> dict:
        """What the batches need besides the epoch to go on where a checkpoint was taken (random draws made in
        the losses, measurements taken so far); saved with every checkpoint."""
        return {}

    def load_state(self, state: dict) -> None:
        """Restore `state` (called on resume, before the first epoch's batches are drawn)."""

    def interim(self, epoch: int, steps: int) -> None:
        """Called before each checkpoint within an epoch, ``steps`` steps into epoch ``epoch`` (0-based)."""


def train_loop(module: nn.Module, data: EpochBatches, target: TargetModel, config: TrainConfig,
               progress: bool = True) -> tuple[list, float]:
    """Train ``module``'s parameters that require grad on ``data``: the one training loop of every method.

    Per epoch, each of ``data``'s batches is one AdamW step (``config.lr``, ``config.weight_decay``) on the
    sum of its loss parts, computed under ``config.dtype``'s autocast, with linear warm-up over
    ``config.warmup_steps`` then cosine decay to 0 at the last step. Each epoch is checkpointed
    (``<config.out>.epochN.pt``: weights, optimiser, schedule, history, seconds), and every
    ``config.checkpoint_steps`` steps within one (``<config.out>.partial.pt``); a rerun resumes from the newest,
    with the same weights at the end as an uninterrupted run (a partial resume skips the epoch's batches done).

    Returns (history, training seconds): one history row per epoch, ``{"epoch": N}`` and ``data.history``'s.
    """
    from specbench.progress import phase

    optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay)
    scheduler = warmup_cosine(optimizer, config.warmup_steps, data.steps * config.epochs)
    checkpoints = EpochCheckpoints(Path(config.out), module, optimizer, scheduler)
    first_epoch, history, seconds, skip, records = checkpoints.resume(config.epochs, data)
    for epoch in range(first_epoch, config.epochs):
        began = time.perf_counter()
        module.train()
        if epoch > first_epoch:
            skip, records = 0, []
        bar = phase(f"train {config.method} epoch {epoch + 1}/{config.epochs}", data.steps, "step", show=progress)
        bar.update(skip)
        for number, batch in enumerate(data.batches(epoch)):
            if number < skip:
                continue  # done before the partial checkpoint: drawn (the order stays the same), not trained
            optimizer.zero_grad(set_to_none=True)
            step: list[float] = []
            for part in data.losses(batch):
                with autocast(target.device, config.dtype):
                    out = part()
                if out is not None:
                    out.loss.backward()
                    step += out.record.detach().float().tolist()  # one host sync per part
            optimizer.step()
            scheduler.step()
            records.append(step)
            bar.update(1, **({"loss": f"{sum(step) / len(step):.3f}"} if step else {}))
            if config.checkpoint_steps and (number + 1) % config.checkpoint_steps == 0 and number + 1 < data.steps:
                data.interim(epoch, number + 1)
                checkpoints.save_partial(epoch, number + 1, records, history,
                                         seconds + time.perf_counter() - began, data)
        bar.close()
        seconds += time.perf_counter() - began
        history.append({"epoch": epoch + 1} | data.history(records))
        checkpoints.save(epoch + 1, history, seconds, data)
    return history, seconds


class SampleBatches(EpochBatches):
    """Batches of whole samples, for the methods that learn from a sample at a time (ctc, ctc-ce, eagle).

    Per epoch the samples are shuffled (``random.Random(seed + epoch)``) and ``per_step`` of them make one
    step. ``sample_loss(sample, generator)`` is the method's loss on one sample (None: skip it), one part
    per sample; a method that can batch passes ``batch_losses(samples, generator)`` instead: the losses
    [B'] of the step's samples that count (None: none does), from one forward, one part per step; the
    step's gradient is the same. The generator is seeded per epoch (``seed + epoch``), for the method's own
    random choices (anchor subsets, noise). The history row: the epoch's mean step loss (a step's loss is
    the mean over its samples that count) and the means over its first and last tenth of steps."""

    def __init__(self, samples: list, per_step: int, seed: int,
                 sample_loss: Callable[[Any, torch.Generator], torch.Tensor | None] | None = None,
                 batch_losses: Callable[[list, torch.Generator], torch.Tensor | None] | None = None) -> None:
        if (sample_loss is None) == (batch_losses is None):
            raise ValueError("give one of sample_loss and batch_losses")
        self.samples, self.per_step, self.seed = samples, per_step, seed
        self.sample_loss, self.batch_losses = sample_loss, batch_losses
        self.steps = math.ceil(len(samples) / per_step)
        self.draws: tuple[int, torch.Generator] | None = None  # (epoch, its generator) once drawn
        self.resumed_draws: tuple[int, torch.Tensor] | None = None  # (epoch, generator state) to resume with

    def batches(self, epoch: int) -> Iterable[tuple[list, torch.Generator]]:
        import random

        order = list(range(len(self.samples)))
        random.Random(self.seed + epoch).shuffle(order)
        generator = torch.Generator().manual_seed(self.seed + epoch)  # reproducible per epoch
        if self.resumed_draws is not None and self.resumed_draws[0] == epoch:
            generator.set_state(self.resumed_draws[1])  # a partial checkpoint's: the draws of the steps it skips
        self.resumed_draws, self.draws = None, (epoch, generator)
        for step in range(self.steps):
            yield [self.samples[i] for i in order[step * self.per_step : (step + 1) * self.per_step]], generator

    def state(self) -> dict:
        """The current epoch's generator (the random draws of the steps done): used when the checkpoint is
        partial, ignored after an epoch's end (the next epoch seeds its own)."""
        return {} if self.draws is None else {"draws": (self.draws[0], self.draws[1].get_state())}

    def load_state(self, state: dict) -> None:
        self.resumed_draws = state.get("draws")

    def losses(self, batch: tuple[list, torch.Generator]) -> list[Callable[[], StepLoss | None]]:
        group, generator = batch
        if self.batch_losses is not None:
            def packed() -> StepLoss | None:
                per_sample = self.batch_losses(group, generator)  # [B'] or None
                return None if per_sample is None else StepLoss(per_sample.sum() / len(group), per_sample)

            return [packed]

        def one(sample) -> StepLoss | None:
            loss = self.sample_loss(sample, generator)  # scalar or None
            return None if loss is None else StepLoss(loss / len(group), loss.reshape(1))

        return [lambda sample=sample: one(sample) for sample in group]

    def history(self, records: list[list[float]]) -> dict:
        losses = [sum(step) / len(step) for step in records if step]
        tenth = max(1, len(losses) // 10)
        return {"train_loss": sum(losses) / max(1, len(losses)), "first_tenth_loss": sum(losses[:tenth]) / tenth,
                "last_tenth_loss": sum(losses[-tenth:]) / tenth}


class CurveBatches(SampleBatches):
    """`SampleBatches` whose per-epoch history also holds ``measure()`` (a held-out score: eagle's and eagle3's
    greedy chain acceptance) and the training tokens seen so far: the learning curve, one point per epoch and one
    per checkpoint within an epoch (``points``; kept in the checkpoints, so a resumed run keeps the earlier
    points). ``tokens_before``: what a warm start had seen."""

    def __init__(self, samples: list, per_step: int, seed: int, sample_loss: Callable, measure: Callable[[], dict],
                 tokens_before: int = 0) -> None:
        super().__init__(samples, per_step, seed, sample_loss)
        self.measure, self.epoch, self.drawn_tokens, self.tokens_before = measure, 0, 0, tokens_before
        self.tokens_per_epoch = sum(len(sample.input_ids) for sample in samples)
        self.points: list[dict] = []  # the curve's points within epochs

    def batches(self, epoch: int):
        self.epoch, self.drawn_tokens = epoch, 0
        for group, generator in super().batches(epoch):
            self.drawn_tokens += sum(len(sample.input_ids) for sample in group)  # the step about to be trained
            yield group, generator

    def history(self, records: list[list[float]]) -> dict:
        tokens = self.tokens_before + (self.epoch + 1) * self.tokens_per_epoch
        return super().history(records) | {"tokens_seen": tokens} | self.measure()

    def interim(self, epoch: int, steps: int) -> None:
        self.points.append({"epoch": round(epoch + steps / self.steps, 4),
                            "tokens_seen": self.tokens_before + epoch * self.tokens_per_epoch + self.drawn_tokens}
                           | self.measure())

    def state(self) -> dict:
        return super().state() | {"points": self.points}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.points = list(state.get("points", []))

    def write_curve(self, stem: Path, start: dict, history: list[dict], heldout_samples: int, measure: str) -> list[dict]:
        """The curve (``start``, the run's first point, then every point by tokens seen), also written to
        ``<stem>.curve.json``."""
        curve = [start] + curve_points(self.points, history)
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_name(stem.name + ".curve.json").write_text(json.dumps(
            {"measure": measure, "train_samples": len(self.samples), "heldout_samples": heldout_samples,
             "curve": curve}, indent=1) + "\n")
        return curve


def curve_points(within: list[dict], history: list[dict]) -> list[dict]:
    """The learning curve's points after the start, by tokens seen: the points within epochs and each epoch's
    end (its history row's number, tokens seen and held-out measurements)."""
    ends = [{key: value for key, value in row.items() if key in ("epoch", "tokens_seen") or key.startswith("heldout")}
            for row in history]
    return sorted(within + ends, key=lambda point: point["tokens_seen"])


@torch.no_grad()
def chain_scores(module: nn.Module, samples: Iterable[Any], levels: int,
                 drafted: Callable[[Any, int, int], list[torch.Tensor]]) -> dict:
    """Held-out acceptance of a greedy draft chain along the responses, by depth, the one scoring of eagle and
    eagle3: ``drafted(sample, start, end)`` gives the top-1 token ids [R] at depths 1..levels for the anchors
    ``start..end-1``, each scored against x_{t+d+1}. ``heldout_depth_top1[d-1]``: right at depth d;
    ``heldout_chain[d-1]``: right at every depth <= d (the chance a chain of d drafts is wholly accepted), so
    ``heldout_chain_tau`` = 1 + sum(chain). Anchors are response positions where every depth has a label.
    ``module`` drafts in eval mode and is left in the mode it was in."""
    was_training = module.training
    module.eval()
    right_at, chain_at, anchors = torch.zeros(levels), torch.zeros(levels), 0
    for sample in samples:
        start, end = sample.prompt_len - 1, len(sample.input_ids) - levels - 1  # labels x_{t+levels+1} exist
        if end <= start:
            continue
        right = torch.stack([
            ids.cpu() == sample.input_ids[start + depth + 1 : end + depth + 1]
            for depth, ids in enumerate(drafted(sample, start, end), start=1)])  # [levels, R]
        right_at += right.sum(dim=1)
        chain_at += right.int().cumprod(dim=0).sum(dim=1)
        anchors += right.shape[1]
    module.train(was_training)
    chain = (chain_at / max(1, anchors)).tolist()
    return {"heldout_depth_top1": [round(x, 4) for x in (right_at / max(1, anchors)).tolist()],
            "heldout_chain": [round(x, 4) for x in chain], "heldout_chain_tau": round(1 + sum(chain), 4),
            "heldout_chain_anchors": anchors}


def load_warm_start(stem: Path, method: str, target: TargetModel, metric: str) -> tuple[dict, dict, dict]:
    """(state dict with its token ranking, recipe, provenance) of a trained ``method`` checkpoint that a new run
    goes on from (``--init-from``): a new schedule runs over its weights, and the learning curve goes on from
    the tokens it had seen. ``metric``: the held-out figure the provenance keeps."""
    from specbench.checkpoint import load_checkpoint

    state, recipe = load_checkpoint(stem, target.handle)
    if recipe.get("method") != method:
        raise SpecbenchError(f"--init-from {stem}: a {recipe.get('method')} checkpoint, not {method}")
    curve = recipe.get("metrics", {}).get("curve") or [{"tokens_seen": 0}]
    provenance = {"checkpoint": stem.name, "hyperparameters": recipe["hyperparameters"],
                  "training_seconds": recipe.get("training_seconds"), "tokens_seen": curve[-1].get("tokens_seen", 0),
                  "train_samples": recipe.get("data", {}).get("train_samples"),
                  metric: recipe.get("metrics", {}).get(metric)}
    return state, recipe, provenance


def write_trained(stem: Path, module: nn.Module, ranking: torch.Tensor, target: TargetModel, config: TrainConfig,
                  manifest: dict, data: dict, metrics: dict, history: list, seconds: float, **hyperparameters) -> dict:
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


def sample_training_data(config: SampleTrainConfig, target: TargetModel, ranking: torch.Tensor | None = None,
                         manifest: dict | None = None) -> tuple[dict, torch.Tensor, object, object, list, list]:
    """What a sample-level trainer (ctc, ctc-ce, eagle, eagle3) starts from: the checked cache manifest (read
    here unless the caller has it), the token ranking (``ranking``, a loaded checkpoint's, or the cache's
    counts), the train and evaluation vocabularies (`training_vocabularies`), and the train (cut to
    ``config.max_train_samples``) and held-out samples; seeds torch and freezes the target first."""
    from specbench.drafters.training.distill import iter_samples

    manifest = manifest if manifest is not None else checked_manifest(Path(config.cache), target)
    torch.manual_seed(config.seed)
    freeze(target)
    ranking, vocab, eval_vocab = training_vocabularies(Path(config.cache), target, config.train_vocab, ranking)
    train = list(iter_samples(Path(config.cache), "train"))[: config.max_train_samples]
    heldout = list(iter_samples(Path(config.cache), "heldout"))
    return manifest, ranking, vocab, eval_vocab, train, heldout
