"""Self-distillation data: the target's own greedy answers to training prompts, and its hidden states.

Labels are exactly what the target emits: responses are generated greedily by the target (in batches,
left-padded, fp32 by default), then every position of prompt + response is run through the target once
more to record its last-layer hidden states (after the final norm). Drafters train on this cache
without running the target again.

Layout of a cache directory::

    manifest.json                      target identity and hash, prompt slice, settings, counts
    train/tokens-00000.safetensors     input_ids int32[T], offsets int64[S+1], prompt_lens int64[S]
    train/shard-00000.safetensors      the same + hidden float16[T, H]   (T = tokens of the shard's S samples)
    heldout/...                        the same for the held-out prompts

Files are written whole (temp file, then rename) and listed in the manifest as they finish, so an
interrupted run resumes at the first missing one; with the same seed the result is identical. A cache
grows: rerunning with a larger ``--train`` (all else equal) keeps the finished shards and adds the rest.
The token files are the expensive, compact half (greedy generation; about 1 KB per sample): a cache made
with ``tokens_only`` holds just them, can be committed or copied, and seeds a full cache elsewhere
(``tokens_from``), which then only recomputes hidden states.
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
    aux_layers: list[int] | None = None  # also record the hidden states entering these layers (eagle3's features)


@dataclass
class Sample:
    """One distilled conversation: ids [L] = prompt + response, hidden [L, H] at every position, and aux
    [L, k H] (the hidden states entering the cache's ``aux_layers``, concatenated) when the cache records them."""

    input_ids: torch.Tensor
    prompt_len: int
    hidden: torch.Tensor
    aux: torch.Tensor | None = None


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
def hidden_states(target: TargetModel, sequences: list[list[int]], aux_layers: list[int] | None = None
                  ) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """(last-layer hidden states after the final norm [L_i, H], the states entering ``aux_layers`` [L_i, k H] or
    None) of each sequence, from one right-padded batch forward; the aux states come from the target's
    `specbench.layer_tap.LayerTap`, the same hooks eagle3 reads at inference."""
    width = max(len(s) for s in sequences)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    if aux_layers:
        if target.handle.taps is None:
            raise SpecbenchError(f"{target.name}: no layer taps to record auxiliary hidden states from")
        target.handle.taps.request(aux_layers)
    out = target.decoder(input_ids=ids.to(target.device), attention_mask=mask.to(target.device)).last_hidden_state
    aux = target.handle.taps.batch_states(aux_layers) if aux_layers else None  # [B, width, k H]
    return [(out[row, : len(seq)].float().cpu(), None if aux is None else aux[row, : len(seq)].float().cpu())
            for row, seq in enumerate(sequences)]


def generate_sequences(target: TargetModel, prompts: list[list[int]], batch_size: int, max_new_tokens: int) -> list[list[int]]:
    """prompt + greedy response of each prompt, in order; batched by prompt length to keep padding small."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    sequences: dict[int, list[int]] = {}
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        for i, response in zip(batch, greedy_batch(target, [prompts[i] for i in batch], max_new_tokens)):
            sequences[i] = prompts[i] + response
    return [sequences[i] for i in range(len(prompts))]


def pack_tokens(prompts: list[list[int]], sequences: list[list[int]]) -> dict[str, torch.Tensor]:
    """The token half of a shard: input_ids int32[T] (prompt + response of each sample, concatenated),
    offsets int64[S+1], prompt_lens int64[S]."""
    lengths = torch.tensor([len(seq) for seq in sequences])
    return {
        "input_ids": torch.tensor([token for seq in sequences for token in seq], dtype=torch.int32),
        "offsets": torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
        "prompt_lens": torch.tensor([len(p) for p in prompts], dtype=torch.long),
    }


def generate_shards(target: TargetModel, shards: list[list[list[int]]], config: DistillConfig) -> list[dict[str, torch.Tensor]]:
    """The token halves of several shards, generated together: with ``batch_size`` above ``shard_size``
    (a GPU), one generation batch spans shards. Greedy responses do not depend on the batching."""
    flat = [prompt for shard in shards for prompt in shard]
    sequences = iter(generate_sequences(target, flat, config.batch_size, config.max_new_tokens))
    return [pack_tokens(shard, [next(sequences) for _ in shard]) for shard in shards]


def add_hidden(target: TargetModel, tokens: dict[str, torch.Tensor], config: DistillConfig) -> dict[str, torch.Tensor]:
    """The whole shard: ``tokens`` plus hidden float16[T, H] (and aux float16[T, k H] with ``config.aux_layers``),
    one target forward per batch of samples."""
    offsets = tokens["offsets"].tolist()
    sequences = [tokens["input_ids"][a:b].tolist() for a, b in zip(offsets, offsets[1:])]
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    states: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
    for start in range(0, len(order), config.batch_size):
        batch = order[start : start + config.batch_size]
        for i, pair in zip(batch, hidden_states(target, [sequences[i] for i in batch], config.aux_layers)):
            states[i] = pair
    shard = tokens | {"hidden": torch.cat([states[i][0] for i in range(len(sequences))]).to(torch.float16)}
    if config.aux_layers:
        shard["aux"] = torch.cat([states[i][1] for i in range(len(sequences))]).to(torch.float16)
    return shard


def token_name(split: str, number: int) -> str:
    return f"{split}/tokens-{number:05d}.safetensors"


def shard_name(split: str, number: int) -> str:
    return f"{split}/shard-{number:05d}.safetensors"


def save_atomic(tensors: dict[str, torch.Tensor], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(path)


def new_manifest(config: DistillConfig, identity: dict, prompt_info: dict | None) -> dict:
    return {"target": identity, "config": asdict(config), "prompts": prompt_info or {},
            "token_shards": {split: [] for split in SPLITS}, "shards": {split: [] for split in SPLITS},
            "counts": {}}


def check_compatible(path: Path, manifest: dict, identity: dict, config: DistillConfig, growing: bool) -> None:
    """Refuse a cache made from another target or with other settings (``train`` may grow; ``batch_size``
    is how the work is batched, not what it makes, so it may change between sittings)."""
    if manifest["target"] != identity:
        raise SpecbenchError(f"{path} was distilled from {manifest['target']['name']}, not {identity['name']}")
    old = {"aux_layers": None} | manifest["config"] | {"out": config.out, "batch_size": config.batch_size}
    if not growing:  # a token source: only its tokens are used, whatever states it recorded
        old["aux_layers"] = config.aux_layers
    if old | {"train": config.train} != asdict(config) or (growing and config.train < old["train"]):
        raise SpecbenchError(f"{path} was distilled with other settings; choose another --out "
                             "(only --train may grow)")


def shard_prompts(tokens: dict[str, torch.Tensor]) -> list[list[int]]:
    """The prompts of a token shard (``pack_tokens``' layout), in order."""
    starts, lengths = tokens["offsets"][:-1].tolist(), tokens["prompt_lens"].tolist()
    return [tokens["input_ids"][a : a + n].tolist() for a, n in zip(starts, lengths)]


def prompts_in_tokens(source: Path, train: int | None, heldout: int) -> dict[str, list[list[int]]]:
    """The prompts a token cache (``--tokens-from``) was made from, per split, in order: the first ``train``
    (all when None) and ``heldout`` of them. Hidden states can then be added without the ShareGPT package
    (on a GPU machine, say); asking for more prompts than the cache holds is refused, not generated."""
    manifest = read_manifest(source)
    if manifest is None:
        raise SpecbenchError(f"--tokens-from {source}: not a distillation cache (no manifest.json)")
    wanted = {"train": train, "heldout": heldout}
    prompts: dict[str, list[list[int]]] = {}
    for split in SPLITS:
        found: list[list[int]] = []
        for name in manifest.get("token_shards", {}).get(split, []):
            if wanted[split] is not None and len(found) >= wanted[split]:
                break
            found += shard_prompts(load_file(str(source / name)))
        if wanted[split] is not None and len(found) < wanted[split]:
            raise SpecbenchError(f"--tokens-from {source} holds {len(found)} {split} prompts, fewer than the "
                                 f"{wanted[split]} asked for; grow it first with --tokens-only")
        prompts[split] = found[: wanted[split]] if wanted[split] is not None else found
    return prompts


def reused_tokens(source: Path | None, source_manifest: dict | None, name: str,
                  prompts: list[list[int]]) -> dict[str, torch.Tensor] | None:
    """A finished token shard of another cache (``--tokens-from``) whose prompts are exactly these."""
    if source is None or source_manifest is None or name not in source_manifest["token_shards"].get(name.split("/")[0], []):
        return None
    tokens = load_file(str(source / name))
    return tokens if shard_prompts(tokens) == prompts else None


def run_distill(config: DistillConfig, target: TargetModel, prompt_ids: dict[str, list[list[int]]],
                prompt_info: dict | None = None, progress: bool = True, tokens_only: bool = False,
                tokens_from: Path | None = None) -> Path:
    """Distill ``prompt_ids[split]`` for each split into ``config.out``; resumes finished shards.

    Each shard is made in two steps, each written whole and recorded in the manifest as it finishes:
    ``tokens-N`` (the greedy responses: most of the cost, a few KB) then ``shard-N`` (tokens + hidden
    states). ``tokens_only`` stops after the first step, so the expensive, compact half can be kept
    (committed, copied) and the hidden states recomputed later; ``tokens_from`` names such a cache, whose
    token shards are used instead of generating when their prompts match.
    """
    out = Path(config.out)
    manifest = read_manifest(out)
    identity = {"name": target.name, "sha256": target.source.sha256 if target.source else None}
    if manifest is not None:
        check_compatible(out, manifest, identity, config, growing=True)
        manifest.setdefault("token_shards", {split: [] for split in SPLITS})
        if config.train > manifest["config"]["train"]:
            grow(out, manifest, config)
    else:
        manifest = new_manifest(config, identity, prompt_info)
    source_manifest = read_manifest(Path(tokens_from)) if tokens_from else None
    if tokens_from and source_manifest is None:
        raise SpecbenchError(f"--tokens-from {tokens_from}: not a distillation cache (no manifest.json)")
    if source_manifest is not None:
        check_compatible(Path(tokens_from), source_manifest, identity, config, growing=False)
    sitting = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "device": str(target.device),
               "dtype": str(target.dtype).removeprefix("torch."), "batch_size": config.batch_size,
               "token_shards_made": 0, "shards_made": 0}
    manifest.setdefault("sittings", [])  # where and how each part of the cache was made

    def count_made(kind: str) -> None:
        """Count a file this sitting made; the sitting is recorded with its first, so resuming a finished
        cache (e.g. a committed token cache) leaves its manifest as it was."""
        if sitting["token_shards_made"] + sitting["shards_made"] == 0:
            manifest["sittings"].append(sitting)
        sitting[kind] += 1

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "manifest.json", manifest)
    from specbench.progress import phase

    source = Path(tokens_from) if tokens_from else None
    shards_per_batch = max(1, config.batch_size // config.shard_size)
    for split in SPLITS:
        prompts = prompt_ids.get(split, [])
        chunks = [prompts[start : start + config.shard_size] for start in range(0, len(prompts), config.shard_size)]
        bar = phase(f"distill {split}", len(prompts), "prompt", show=progress)
        counts = manifest["counts"].setdefault(split, {"samples": 0, "tokens": 0, "response_tokens": 0,
                                                       "generate_seconds": 0.0, "hidden_seconds": 0.0})

        def has_tokens(number: int) -> bool:
            return token_name(split, number) in manifest["token_shards"][split]

        def reusable(number: int) -> dict[str, torch.Tensor] | None:
            return reused_tokens(source, source_manifest, token_name(split, number), chunks[number])

        def record_tokens(number: int, tokens: dict[str, torch.Tensor]) -> None:
            save_atomic(tokens, out / token_name(split, number))
            manifest["token_shards"][split].append(token_name(split, number))
            counts["samples"] += len(tokens["prompt_lens"])
            counts["tokens"] += int(tokens["input_ids"].numel())
            counts["response_tokens"] += int(tokens["input_ids"].numel() - tokens["prompt_lens"].sum())
            count_made("token_shards_made")
            write_json(out / "manifest.json", manifest)

        for number, chunk in enumerate(chunks):
            shard_file = shard_name(split, number)
            finished = has_tokens(number) if tokens_only else shard_file in manifest["shards"][split]
            if finished:
                bar.update(len(chunk))
                continue
            reused = None if has_tokens(number) else reusable(number)
            if reused is not None:
                record_tokens(number, reused)
            elif not has_tokens(number):  # generate this shard and the next ones that need it, up to one batch
                group = [number]
                while len(group) < shards_per_batch and group[-1] + 1 < len(chunks):
                    following = group[-1] + 1
                    if has_tokens(following) or reusable(following) is not None:
                        break
                    group.append(following)
                began = time.perf_counter()
                made = generate_shards(target, [chunks[n] for n in group], config)
                counts["generate_seconds"] += time.perf_counter() - began
                for n, tokens in zip(group, made):
                    record_tokens(n, tokens)
            if not tokens_only:
                began = time.perf_counter()
                tokens = load_file(str(out / token_name(split, number)))
                save_atomic(add_hidden(target, tokens, config), out / shard_file)
                manifest["shards"][split].append(shard_file)
                counts["hidden_seconds"] += time.perf_counter() - began
                count_made("shards_made")
                write_json(out / "manifest.json", manifest)
            bar.update(len(chunk))
        bar.close()
    return out


def grow(out: Path, manifest: dict, config: DistillConfig) -> None:
    """Prepare a cache for more training prompts: the prompt order is fixed by the seed, so the finished
    full shards stay valid; a last, partial train shard (tokens and hidden states) is dropped, its counts
    subtracted (its time kept), so that it is redone with its full set of prompts."""
    tokens = manifest["token_shards"]["train"]
    if tokens:
        last = shard_tensors(out / tokens[-1], ("input_ids", "prompt_lens"))
        if len(last["prompt_lens"]) < config.shard_size:
            counts = manifest["counts"]["train"]
            counts["samples"] -= len(last["prompt_lens"])
            counts["tokens"] -= int(last["input_ids"].numel())
            counts["response_tokens"] -= int(last["input_ids"].numel() - last["prompt_lens"].sum())
            partial = tokens.pop()
            shards = manifest["shards"]["train"]
            if shards and shards[-1] == partial.replace("/tokens-", "/shard-"):
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
            aux = tensors["aux"][a:b] if "aux" in tensors else None
            yield Sample(tensors["input_ids"][a:b].long(), prompt_len, tensors["hidden"][a:b], aux)
