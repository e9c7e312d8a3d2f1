"""Self-distillation data: the target's own greedy answers to training prompts, and its hidden states.

Labels are exactly what the target emits: responses are generated greedily by the target (in batches,
left-padded, fp32 by default), then every position of prompt + response is run through the target once
more to record its last-layer hidden states (after the final norm). Drafters train on this cache
without running the target again.

Layout of a cache directory::

    manifest.json                      target identity and hash, prompt slice, settings, counts
    train/shard-00000.safetensors      input_ids int32[T], offsets int64[S+1], prompt_lens int64[S],
    heldout/shard-00000.safetensors    hidden float16[T, H]   (T = tokens of the shard's S samples)

Shards are written whole (temp file, then rename) and listed in the manifest as they finish, so an
interrupted run resumes at the first missing shard; with the same seed the result is identical. A cache
grows: rerunning with a larger ``--train`` (all else equal) keeps the finished shards and adds the rest.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from specbench.errors import SpecbenchError
from specbench.model import TargetModel
from specbench.results import read_manifest, write_json

SPLITS = ("heldout", "train")


@dataclass
class DistillConfig:
    out: str
    model: str = "default"
    train: int = 1000
    heldout: int = 64
    max_prompt_tokens: int = 256
    max_new_tokens: int = 128
    batch_size: int = 16
    shard_size: int = 64
    seed: int = 0


@dataclass
class Sample:
    """One distilled conversation: ids [L] = prompt + response, hidden [L, H] at every position."""

    input_ids: torch.Tensor
    prompt_len: int
    hidden: torch.Tensor


@torch.inference_mode()
def greedy_batch(target: TargetModel, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy responses (up to and including EOS) for a batch of prompts, left-padded."""
    pad = getattr(target.tokenizer, "pad_token_id", None)
    pad = pad if pad is not None else min(target.eos_ids)
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    out = target.model.generate(ids.to(target.device), attention_mask=mask.to(target.device), do_sample=False,
                                max_new_tokens=max_new_tokens, pad_token_id=pad, temperature=None, top_p=None,
                                top_k=None)[:, width:].tolist()
    responses = []
    for row in out:
        cut = next((i + 1 for i, token in enumerate(row) if token in target.eos_ids), len(row))
        responses.append(row[:cut])
    return responses


@torch.inference_mode()
def hidden_states(target: TargetModel, sequences: list[list[int]]) -> list[torch.Tensor]:
    """Last-layer hidden states (after the final norm) of each sequence: list of Tensor[L_i, H], right-padded batch."""
    width = max(len(s) for s in sequences)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    out = target.decoder(input_ids=ids.to(target.device), attention_mask=mask.to(target.device)).last_hidden_state
    return [out[row, : len(seq)].float().cpu() for row, seq in enumerate(sequences)]


def distill_shard(target: TargetModel, prompts: list[list[int]], config: DistillConfig) -> dict[str, torch.Tensor]:
    """Generate and record one shard; prompts are batched by length to keep padding small."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    sequences: dict[int, list[int]] = {}
    for start in range(0, len(order), config.batch_size):
        batch = order[start : start + config.batch_size]
        for i, response in zip(batch, greedy_batch(target, [prompts[i] for i in batch], config.max_new_tokens)):
            sequences[i] = prompts[i] + response
    hidden: dict[int, torch.Tensor] = {}
    for start in range(0, len(order), config.batch_size):
        batch = order[start : start + config.batch_size]
        for i, states in zip(batch, hidden_states(target, [sequences[i] for i in batch])):
            hidden[i] = states
    flat = [token for i in range(len(prompts)) for token in sequences[i]]
    lengths = torch.tensor([len(sequences[i]) for i in range(len(prompts))])
    return {
        "input_ids": torch.tensor(flat, dtype=torch.int32),
        "offsets": torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
        "prompt_lens": torch.tensor([len(p) for p in prompts], dtype=torch.long),
        "hidden": torch.cat([hidden[i] for i in range(len(prompts))]).to(torch.float16),
    }


def run_distill(config: DistillConfig, target: TargetModel, prompt_ids: dict[str, list[list[int]]],
                prompt_info: dict | None = None, progress: bool = True) -> Path:
    """Distill ``prompt_ids[split]`` for each split into ``config.out``; resumes finished shards."""
    out = Path(config.out)
    manifest = read_manifest(out)
    identity = {"name": target.name, "sha256": target.source.sha256 if target.source else None}
    if manifest is not None:
        if manifest["target"] != identity:
            raise SpecbenchError(f"{out} was distilled from {manifest['target']['name']}, not {target.name}")
        old = manifest["config"] | {"out": config.out}
        if old | {"train": config.train} != asdict(config) or config.train < old["train"]:
            raise SpecbenchError(f"{out} was distilled with other settings; choose another --out "
                                 "(only --train may grow)")
        if config.train > old["train"]:
            grow(out, manifest, config)
    else:
        manifest = {"target": identity, "config": asdict(config), "prompts": prompt_info or {},
                    "shards": {split: [] for split in SPLITS}, "counts": {}}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "manifest.json", manifest)
    from tqdm import tqdm

    for split in SPLITS:
        prompts = prompt_ids.get(split, [])
        starts = range(0, len(prompts), config.shard_size)
        bar = tqdm(total=len(prompts), desc=f"distill {split}", unit="prompt", disable=not progress)
        for number, start in enumerate(starts):
            name = f"{split}/shard-{number:05d}.safetensors"
            chunk = prompts[start : start + config.shard_size]
            if name not in manifest["shards"][split]:
                began = time.perf_counter()
                tensors = distill_shard(target, chunk, config)
                (out / split).mkdir(exist_ok=True)
                tmp = out / f"{name}.tmp"
                save_file(tensors, str(tmp))
                tmp.replace(out / name)
                manifest["shards"][split].append(name)
                counts = manifest["counts"].setdefault(split, {"samples": 0, "tokens": 0, "response_tokens": 0, "seconds": 0.0})
                counts["samples"] += len(chunk)
                counts["tokens"] += int(tensors["input_ids"].numel())
                counts["response_tokens"] += int(tensors["input_ids"].numel() - tensors["prompt_lens"].sum())
                counts["seconds"] += time.perf_counter() - began
                write_json(out / "manifest.json", manifest)
            bar.update(len(chunk))
        bar.close()
    return out


def grow(out: Path, manifest: dict, config: DistillConfig) -> None:
    """Prepare a cache for more training prompts: the prompt order is fixed by the seed, so the finished
    full shards stay valid; a last, partial train shard is dropped (its counts subtracted, its time kept
    in ``seconds``) so that the shard is redone with its full set of prompts."""
    shards = manifest["shards"]["train"]
    if shards:
        last = shard_tensors(out / shards[-1], ("input_ids", "prompt_lens"))
        if len(last["prompt_lens"]) < config.shard_size:
            counts = manifest["counts"]["train"]
            counts["samples"] -= len(last["prompt_lens"])
            counts["tokens"] -= int(last["input_ids"].numel())
            counts["response_tokens"] -= int(last["input_ids"].numel() - last["prompt_lens"].sum())
            shards.pop()
    manifest["config"]["train"] = config.train


def shard_tensors(path: Path, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Only the named tensors of one shard (the hidden states are most of its size)."""
    with safe_open(str(path), framework="pt") as shard:
        return {name: shard.get_tensor(name) for name in names}


def shard_paths(cache: Path, split: str) -> list[Path]:
    """The finished shards of ``split``, in order."""
    manifest = read_manifest(Path(cache))
    if manifest is None:
        raise SpecbenchError(f"{cache} is not a distillation cache (no manifest.json)")
    return [Path(cache) / name for name in manifest["shards"].get(split, [])]


def iter_token_ids(cache: Path, split: str) -> Iterator[torch.Tensor]:
    """Each shard's token ids (prompts and responses, IntTensor[T]), without loading hidden states."""
    for path in shard_paths(cache, split):
        yield shard_tensors(path, ("input_ids",))["input_ids"]


def iter_samples(cache: Path, split: str) -> Iterator[Sample]:
    """Every distilled sample of ``split``, shard by shard, in order."""
    for path in shard_paths(cache, split):
        tensors = load_file(str(path))
        offsets, prompt_lens = tensors["offsets"].tolist(), tensors["prompt_lens"].tolist()
        for i, prompt_len in enumerate(prompt_lens):
            a, b = offsets[i], offsets[i + 1]
            yield Sample(tensors["input_ids"][a:b].long(), prompt_len, tensors["hidden"][a:b])
