"""Training of head drafters (medusa, hydra) on a self-distillation cache, with the target frozen.

Every response position t of a distilled sample gives one example: the target's hidden state h_t (which
produced token x_{t+1}, the root) and the window x_{t+1} .. x_{t+1+K}. Head k is trained with
cross-entropy against x_{t+1+k}, the target's own token k places after the root (Medusa); Hydra's heads
also see the embeddings of x_{t+1} .. x_{t+k} (teacher forcing). Logits come from the target's frozen
``lm_head``. AdamW, linear warm-up then cosine decay; one checkpoint per epoch (resumable); held-out
per-head top-k accuracy decides the static tree at inference.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from specbench.checkpoint import save_checkpoint, target_identity
from specbench.drafters.hydra import HydraHeads
from specbench.drafters.medusa import MedusaHeads
from specbench.drafters.training.common import EpochCheckpoints, checked_manifest, freeze, warmup_cosine
from specbench.drafters.training.distill import iter_samples
from specbench.errors import SpecbenchError
from specbench.model import TargetModel

IGNORE = -100
MODULES = {"medusa": MedusaHeads, "hydra": HydraHeads}


@dataclass
class HeadTrainConfig:
    method: str
    cache: str
    out: str  # checkpoint stem (writes <out>.safetensors and <out>.json)
    num_heads: int = 4
    num_layers: int = 1
    epochs: int = 2
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 256
    warmup_steps: int = 50
    head_decay: float = 0.8  # loss weight of head k is head_decay ** (k - 1), as in Medusa
    max_rank: int = 10
    max_train_positions: int | None = None
    seed: int = 0
    loss: str = "greedy"  # "greedy": CE on the target's tokens; "teacher": CE on the target's distributions (Hydra++)


def position_dataset(cache: Path, split: str, lookahead: int, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [N, H] (float16) and windows [N, lookahead + 1] (x_{t+1} .. x_{t+1+lookahead}, IGNORE-padded)."""
    hidden, windows = [], []
    count = 0
    for sample in iter_samples(cache, split):
        ids = sample.input_ids
        start, end = sample.prompt_len - 1, len(ids) - 1  # positions whose next token is a response token
        if end <= start:
            continue
        padded = torch.cat([ids, torch.full((lookahead + 1,), IGNORE, dtype=torch.long)])
        positions = torch.arange(start, end)
        windows.append(padded[positions[:, None] + 1 + torch.arange(lookahead + 1)])  # [P, lookahead + 1]
        hidden.append(sample.hidden[start:end])
        count += end - start
        if limit is not None and count >= limit:
            break
    if not hidden:
        raise SpecbenchError(f"{cache}: no {split} samples")
    h, w = torch.cat(hidden), torch.cat(windows)
    return (h[:limit], w[:limit]) if limit else (h, w)


def head_logits(module: nn.Module, target: TargetModel, hidden: torch.Tensor, windows: torch.Tensor) -> torch.Tensor:
    """Logits [K, B, V] of every head for hidden [B, H] and windows [B, K + 1]."""
    k = len(module.heads)
    path_tokens = windows[:, :k].clamp(min=0)  # [B, K] (padding -> token 0, its labels are ignored)
    with torch.no_grad():
        path_embeddings = target.handle.embed_tokens(path_tokens.to(target.device))  # [B, K, H]
    features = module.training_features(hidden, path_embeddings)  # [K, B, H]
    return target.lm_head(features)


def teacher_loss(logits: torch.Tensor, labels: torch.Tensor, hidden: torch.Tensor, index: torch.Tensor,
                 target: TargetModel) -> torch.Tensor:
    """Per-head cross-entropy [K] against the target's own distributions (Hydra++'s teacher loss).

    Head k (0-based) on position t guesses x_{t+2+k}; the target's distribution over that token comes from
    its hidden state at t+1+k, which is row ``index + 1 + k`` of the flat dataset whenever the label
    exists (rows of one sample are consecutive positions). logits [K, B, V], labels [K, B], index [B].
    """
    losses = []
    for k in range(logits.shape[0]):
        valid = labels[k] != IGNORE  # [B]
        rows = (index + 1 + k).clamp(max=len(hidden) - 1)
        with torch.no_grad():
            teacher = target.lm_head(hidden[rows].to(target.device, target.dtype)).float().softmax(dim=-1)  # [B, V]
        per_position = -(teacher * logits[k].float().log_softmax(dim=-1)).sum(dim=-1)  # [B]
        losses.append((per_position * valid).sum() / valid.sum().clamp(min=1))
    return torch.stack(losses)


def evaluate(module: nn.Module, target: TargetModel, hidden: torch.Tensor, windows: torch.Tensor,
             max_rank: int, batch_size: int) -> dict:
    """Held-out top-1 / top-k accuracy per head, and P(rank r is the target's token) per head and rank."""
    k = len(module.heads)
    hits = torch.zeros(k, max_rank)
    totals = torch.zeros(k)
    module.eval()
    with torch.no_grad():
        for start in range(0, len(hidden), batch_size):
            h = hidden[start : start + batch_size].to(target.device, target.dtype)
            w = windows[start : start + batch_size].to(target.device)
            top = head_logits(module, target, h, w).topk(max_rank, dim=-1).indices  # [K, B, R]
            labels = w[:, 1 : k + 1].T  # [K, B]
            valid = labels != IGNORE
            hits += ((top == labels[..., None]) & valid[..., None]).sum(dim=1).float().cpu()
            totals += valid.sum(dim=1).float().cpu()
    per_rank = (hits / totals[:, None].clamp(min=1)).tolist()  # [K, R]
    return {
        "heldout_positions": int(totals[0]),
        "heldout_top1": [row[0] for row in per_rank],
        "heldout_top5": [sum(row[:5]) for row in per_rank],
        "heldout_topk_accuracy": per_rank,
    }


def train_heads(config: HeadTrainConfig, target: TargetModel, progress: bool = True) -> dict:
    """Train, checkpoint each epoch to ``<out>.epoch<N>`` (resume from the newest), write the final recipe."""
    from tqdm import tqdm

    if config.method not in MODULES:
        raise SpecbenchError(f"unknown head method {config.method!r}; choose {', '.join(MODULES)}")
    if config.loss not in ("greedy", "teacher"):
        raise SpecbenchError(f"unknown loss {config.loss!r}; choose greedy or teacher")
    manifest = checked_manifest(Path(config.cache), target)
    torch.manual_seed(config.seed)
    freeze(target)
    hidden, windows = position_dataset(Path(config.cache), "train", config.num_heads, config.max_train_positions)
    held_hidden, held_windows = position_dataset(Path(config.cache), "heldout", config.num_heads)
    module = MODULES[config.method](target.config.hidden_size, config.num_heads, config.num_layers).to(target.device)
    optimizer = torch.optim.AdamW(module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(hidden) / config.batch_size)
    total_steps = steps_per_epoch * config.epochs

    scheduler = warmup_cosine(optimizer, config.warmup_steps, total_steps)
    weights = torch.tensor([config.head_decay**k for k in range(config.num_heads)], device=target.device)
    stem = Path(config.out)
    checkpoints = EpochCheckpoints(stem, module, optimizer, scheduler)
    first_epoch, history, seconds = checkpoints.resume(config.epochs)
    generator = torch.Generator().manual_seed(config.seed)
    for _ in range(first_epoch):
        torch.randperm(len(hidden), generator=generator)  # keep the shuffles of a resumed run identical
    for epoch in range(first_epoch, config.epochs):
        began = time.perf_counter()
        module.train()
        order = torch.randperm(len(hidden), generator=generator)
        losses = []
        bar = tqdm(range(steps_per_epoch), desc=f"{config.method} epoch {epoch + 1}/{config.epochs}", disable=not progress)
        for step in bar:
            index = order[step * config.batch_size : (step + 1) * config.batch_size]
            h = hidden[index].to(target.device, target.dtype)
            w = windows[index].to(target.device)
            logits = head_logits(module, target, h, w)  # [K, B, V]
            labels = w[:, 1 : config.num_heads + 1].T  # [K, B]
            if config.loss == "teacher":
                per_head = teacher_loss(logits, labels, hidden, index, target)
            else:
                per_head = torch.stack([
                    nn.functional.cross_entropy(logits[k].float(), labels[k], ignore_index=IGNORE)
                    for k in range(config.num_heads)
                ])
            loss = (weights * per_head).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(per_head.detach().cpu())
            bar.set_postfix(loss=f"{loss.item():.3f}")
        seconds += time.perf_counter() - began
        mean = torch.stack(losses).mean(0).tolist()
        history.append({"epoch": epoch + 1, "train_loss_per_head": mean, "first_batch_loss": losses[0].tolist(),
                        "last_batch_loss": losses[-1].tolist()})
        checkpoints.save(epoch + 1, history, seconds)
    metrics = evaluate(module, target, held_hidden, held_windows, config.max_rank, config.batch_size)
    recipe = {
        "method": config.method,
        "target": target_identity(target.handle),
        "data": {"cache": str(config.cache), "prompts": manifest.get("prompts"), "distill_config": manifest.get("config"),
                 "train_positions": len(hidden), "heldout_positions": len(held_hidden)},
        "hyperparameters": asdict(config) | {"cache": None, "out": None},
        "parameters": sum(p.numel() for p in module.parameters()),
        "metrics": metrics,
        "history": history,
        "training_seconds": seconds,
        "torch_threads": torch.get_num_threads(),
    }
    save_checkpoint(stem, module.state_dict(), recipe)
    return recipe
