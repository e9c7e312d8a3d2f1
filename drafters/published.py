"""The published checkpoint layouts of Medusa, Hydra and EAGLE: read into specbench's modules, and (Medusa,
Hydra) written out from specbench checkpoints (``specbench convert``).

Layouts (learned from the authors' repositories, FasterDecoding/Medusa e2a5d20, zankner/Hydra 3f39fbd and
SafeAILab/EAGLE, see ../shared/notes/eagle-checkpoints-sampling.md and docs/published-checkpoints.md):

``medusa-1``  ``medusa_lm_head.pt`` (or ``.safetensors``) + ``config.json`` (``medusa_num_heads``,
              ``medusa_num_layers``, ``base_model_name_or_path``). Head k is ``[ResBlock] * L`` then its
              own ``Linear(H, V, bias=False)``: keys ``{k}.{l}.linear.weight`` [H, H], ``{k}.{l}.linear.bias``
              [H] for l < L and ``{k}.{L}.weight`` [V, H].
``medusa-2``  the same without ``{k}.{L}.weight``: the heads use the target's lm_head.
``hydra-mlp`` ``hydra_lm_head.pt`` + ``config.json`` (``hydra_num_heads``, ``hydra_num_layers``,
              ``hydra_head_arch: "mlp"``, ``grounded_heads: true``). Head k reads ``[h; E(root); ...;
              E(y_k)]`` ((k + 2) H wide): ``hydra_mlp.{k}.0.linear.*`` and ``hydra_mlp.{k}.0.res_connection.*``
              [H, (k + 2) H] (output ``res_connection(x) + SiLU(linear(x))``), ``hydra_mlp.{k}.{l}.linear.*``
              [H, H] for 1 <= l < L, ``hydra_lm_head.{k}.weight`` [V, H] and ``.bias`` [V].
``hydra-prefix-mlp`` (Hydra++) the same heads with Dropout modules between them (ResBlocks at indices 1, 3,
              5, ..., lm_heads at ``hydra_lm_head.{k}.1.*``) reading h' from ``prefix_embeding_layer``: a
              one-layer LlamaModel built from the base model's config (its ``layers.0.*`` and final ``norm``)
              over the target's hidden states.
``eagle-1/2`` SafeAILab's ``pytorch_model.bin`` (or ``model.safetensors``) + a LLaMA-style ``config.json`` with
              ``num_hidden_layers: 1`` (and ``bias``): ``fc.weight`` [H, 2H] (+ ``fc.bias``), ``layers.0.*`` of
              a decoder layer without ``input_layernorm``, and a copy of the target's ``embed_tokens``.

The authors' code builds ``[ResBlock] * L``: one module listed L times, so a file holds L identical copies.
specbench reads every copy as written; a file whose copies differ (written from a specbench checkpoint
with distinct layers) loads here as written, but the authors' loader would keep only one copy (the export
says so). The head count comes from the keys: Medusa's loader ignores the released config's
``medusa_num_heads``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from specbench.errors import SpecbenchError

#: weight files that mark a directory as a published checkpoint, per method
WEIGHT_FILES = {"medusa": ("medusa_lm_head.pt", "medusa_lm_head.safetensors"), "hydra": ("hydra_lm_head.pt",),
                "eagle": ("pytorch_model.bin", "model.safetensors")}
MEDUSA_PREFIX = "medusa_head."  # keys of the medusa-1.0 full-model repositories


@dataclass(frozen=True)
class PublishedCheckpoint:
    """A published checkpoint mapped onto specbench's module: ``state`` uses the module's key names and
    ``options`` are its constructor arguments besides the hidden size."""

    method: str
    layout: str
    weights: Path
    config: dict
    state: dict[str, torch.Tensor]
    options: dict

    def recipe(self) -> dict:
        """What a specbench recipe would say, for the run's manifest: where the weights came from."""
        return {"method": self.method, "imported": {"layout": self.layout, "path": str(self.weights),
                                                    "base_model": self.config.get("base_model_name_or_path")},
                "hyperparameters": dict(self.options)}


def published_method(path: Path) -> str | None:
    """"medusa", "hydra" or "eagle" if ``path`` (a directory or its weights file) is a published checkpoint.
    EAGLE's weight file names are the generic ones of any model, so an EAGLE directory is also told by its
    ``config.json``: one decoder layer."""
    path = Path(path)
    for method, names in WEIGHT_FILES.items():
        found = path.name in names and path.is_file() or path.is_dir() and any((path / name).is_file() for name in names)
        if found and (method != "eagle" or one_layer_config(path if path.is_dir() else path.parent)):
            return method
    return None


def one_layer_config(directory: Path) -> bool:
    try:
        return json.loads((directory / "config.json").read_text(encoding="utf-8")).get("num_hidden_layers") == 1
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def weights_file(path: Path, method: str) -> Path:
    path = Path(path)
    if path.is_file():
        return path
    return next(path / name for name in WEIGHT_FILES[method] if (path / name).is_file())


def read_state(weights: Path) -> dict[str, torch.Tensor]:
    """A state dict from ``torch.save`` (read with ``weights_only``: no code runs) or safetensors."""
    try:
        if weights.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(weights))
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as error:  # a corrupt or foreign file: one line, not a traceback
        raise SpecbenchError(f"cannot read {weights}: {type(error).__name__}: {str(error).splitlines()[0]}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise SpecbenchError(f"{weights} does not hold a state dict of tensors")
    return state


def read_config(directory: Path) -> dict:
    path = directory / "config.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise SpecbenchError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None


def load_published(path: Path, method: str, target_config, vocab: int) -> PublishedCheckpoint:
    """Read the published checkpoint at ``path`` for drafter ``method``, checked against a target with config
    ``target_config`` (its hidden size; Hydra++'s prefix layer takes its shape) and vocabulary ``vocab``; any
    mismatch is a `SpecbenchError` naming it."""
    found = published_method(path)
    if found is None:
        raise SpecbenchError(f"{path} is not a published checkpoint (no {' or '.join(sum(WEIGHT_FILES.values(), ()))})")
    if found != method:
        raise SpecbenchError(f"{path} holds published {found.title()} heads; load it with "
                             f"--drafter-option {found}.checkpoint={path}, not {method}")
    weights = weights_file(path, method)
    config = read_config(weights.parent)
    state = read_state(weights)
    readers = {"medusa": read_medusa, "hydra": read_hydra, "eagle": read_eagle}
    checkpoint = readers[method](weights, config, state, target_config)
    check_target(checkpoint, target_config.hidden_size, vocab)
    return checkpoint


def _indices(keys, pattern: str) -> list[tuple[int, ...]]:
    return sorted({tuple(int(g) for g in m.groups()) for k in keys if (m := re.fullmatch(pattern, k))})


def read_medusa(weights: Path, config: dict, state: dict[str, torch.Tensor], target_config=None) -> PublishedCheckpoint:
    state = {k.removeprefix(MEDUSA_PREFIX): v for k, v in state.items()}
    blocks = _indices(state, r"(\d+)\.(\d+)\.linear\.weight")
    if not blocks:
        raise SpecbenchError(f"{weights}: no Medusa head keys ('<head>.<layer>.linear.weight')")
    heads = sorted({k for k, _ in blocks})
    layers = sorted({l for _, l in blocks})
    if heads != list(range(len(heads))) or layers != list(range(len(layers))) or len(blocks) != len(heads) * len(layers):
        raise SpecbenchError(f"{weights}: Medusa heads must each have layers 0..L-1; found {blocks[:8]}")
    num_heads, num_layers = len(heads), len(layers)
    has_lm_heads = f"0.{num_layers}.weight" in state
    mapped: dict[str, torch.Tensor] = {}
    for k in heads:
        for l in layers:
            for part in ("weight", "bias"):
                mapped[f"heads.{k}.{l}.linear.{part}"] = _take(state, f"{k}.{l}.linear.{part}", weights)
        if has_lm_heads:
            mapped[f"lm_heads.{k}.weight"] = _take(state, f"{k}.{num_layers}.weight", weights)
    _no_leftovers(state, weights, "Medusa")
    vocab = mapped["lm_heads.0.weight"].shape[0] if has_lm_heads else 0
    return PublishedCheckpoint("medusa", "medusa-1" if has_lm_heads else "medusa-2", weights, config, mapped,
                               {"num_heads": num_heads, "num_layers": num_layers, "own_vocab": vocab, "own_bias": False})


def read_hydra(weights: Path, config: dict, state: dict[str, torch.Tensor], target_config) -> PublishedCheckpoint:
    arch = config.get("hydra_head_arch", "mlp")
    if arch not in ("mlp", "prefix-mlp"):
        raise SpecbenchError(f"{weights}: hydra_head_arch {arch!r} is not supported (specbench reads 'mlp' and "
                             f"'prefix-mlp' heads; see docs/published-checkpoints.md)")
    if config.get("hidden_state_offset", 0):
        raise SpecbenchError(f"{weights}: hidden_state_offset {config['hidden_state_offset']} (heads reading an earlier "
                             f"layer) is not supported; specbench's heads read the last hidden state")
    # prefix-mlp interleaves Dropout modules: ResBlocks sit at 1, 3, 5, ... and each lm_head at index 1
    position = (lambda layer: 2 * layer + 1) if arch == "prefix-mlp" else (lambda layer: layer)
    projection = ".1" if arch == "prefix-mlp" else ""
    first = f"hydra_mlp.0.{position(0)}"
    if config.get("grounded_heads") is False or f"{first}.res_connection.weight" not in state:
        raise SpecbenchError(f"{weights}: ungrounded Hydra heads (no {first}.res_connection) are Medusa heads; "
                             f"specbench reads grounded ones")
    heads = sorted({k for k, _ in _indices(state, r"hydra_mlp\.(\d+)\.(\d+)\.linear\.weight")})
    num_layers = len(_indices(state, r"hydra_mlp\.0\.(\d+)\.linear\.weight"))
    if heads != list(range(len(heads))):
        raise SpecbenchError(f"{weights}: Hydra heads must be numbered 0..K-1; found {heads}")
    mapped: dict[str, torch.Tensor] = {}
    for k in heads:
        for part in ("weight", "bias"):
            mapped[f"heads.{k}.mix.{part}"] = _take(state, f"hydra_mlp.{k}.{position(0)}.linear.{part}", weights)
            mapped[f"heads.{k}.residual.{part}"] = _take(state, f"hydra_mlp.{k}.{position(0)}.res_connection.{part}", weights)
            for l in range(1, num_layers):
                source = f"hydra_mlp.{k}.{position(l)}.linear.{part}"
                mapped[f"heads.{k}.blocks.{l - 1}.linear.{part}"] = _take(state, source, weights)
            if part == "weight" or f"hydra_lm_head.{k}{projection}.bias" in state:
                mapped[f"lm_heads.{k}.{part}"] = _take(state, f"hydra_lm_head.{k}{projection}.{part}", weights)
        width = mapped[f"heads.{k}.mix.weight"].shape
        if width[1] != (k + 2) * width[0]:
            raise SpecbenchError(f"{weights}: grounded Hydra head {k} should read (k + 2) * H = {(k + 2) * width[0]} "
                                 f"inputs, its first layer reads {width[1]}")
    options = {"num_heads": len(heads), "num_layers": num_layers, "own_vocab": mapped["lm_heads.0.weight"].shape[0],
               "own_bias": "lm_heads.0.bias" in mapped, "projected_residual": True}
    if arch == "prefix-mlp":
        options |= read_prefix_layer(weights, state, mapped, target_config)
    _no_leftovers(state, weights, "Hydra")
    return PublishedCheckpoint("hydra", f"hydra-{arch}", weights, config, mapped, options)


#: Hydra++'s one-layer LlamaModel over the target's hidden states -> `PrefixAttention` attribute names
PREFIX_KEYS = {"input_layernorm": "norm", "self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj",
               "self_attn.v_proj": "v_proj", "self_attn.o_proj": "o_proj", "post_attention_layernorm": "mlp_norm",
               "mlp.gate_proj": "gate_proj", "mlp.up_proj": "up_proj", "mlp.down_proj": "down_proj"}


def read_prefix_layer(weights: Path, state: dict[str, torch.Tensor], mapped: dict[str, torch.Tensor], target_config) -> dict:
    """Move Hydra++'s prefix layer (``prefix_embeding_layer.*``, built by the authors from the base model's config)
    into ``mapped`` as ``prefix.*``; returns the `HydraHeads` options that shape it like the target's layers."""
    layer = "prefix_embeding_layer.layers.0."
    for theirs, mine in PREFIX_KEYS.items():
        mapped[f"prefix.{mine}.weight"] = _take(state, f"{layer}{theirs}.weight", weights)
    mapped["prefix.final_norm.weight"] = _take(state, "prefix_embeding_layer.norm.weight", weights)
    for unused in [k for k in state if k == "prefix_embeding_layer.embed_tokens.weight" or k.endswith("rotary_emb.inv_freq")]:
        del state[unused]  # the prefix model's token embedding is never used; inv_freq is recomputed
    heads = target_config.num_attention_heads
    head_dim = mapped["prefix.q_proj.weight"].shape[0] // heads
    return {"prefix_heads": heads, "prefix_shape": {
        "num_kv_heads": mapped["prefix.k_proj.weight"].shape[0] // head_dim,
        "inner": mapped["prefix.gate_proj.weight"].shape[0], "rope_base": rope_base(target_config, weights),
        "eps": getattr(target_config, "rms_norm_eps", None), "final_norm": True}}


#: EAGLE-1/2's decoder layer (no input_layernorm) -> `PrefixAttention` attribute names
EAGLE_LAYER_KEYS = {key: value for key, value in PREFIX_KEYS.items() if key != "input_layernorm"}


def read_eagle(weights: Path, config: dict, state: dict[str, torch.Tensor], target_config) -> PublishedCheckpoint:
    """SafeAILab's EAGLE-1/2 weights: ``fc.*`` and ``layers.0.*`` (a LLaMA decoder layer without its input
    norm), shaped by the draft's own LLaMA-style ``config.json``; ``embed_tokens`` (a copy of the target's)
    is dropped, the target's own is used."""
    if any(k.startswith("midlayer.") for k in state):
        raise SpecbenchError(f"{weights}: EAGLE-3 weights (midlayer.*); load them with "
                             f"--drafter-option eagle3.checkpoint={weights.parent} (eagle reads EAGLE-1/2 weights)")
    for unused in [k for k in state if k == "embed_tokens.weight" or k.endswith("rotary_emb.inv_freq")]:
        del state[unused]
    mapped = {"fc.weight": _take(state, "fc.weight", weights)}
    if "fc.bias" in state:
        mapped["fc.bias"] = state.pop("fc.bias")
    for theirs, mine in EAGLE_LAYER_KEYS.items():
        mapped[f"layer.{mine}.weight"] = _take(state, f"layers.0.{theirs}.weight", weights)
    _no_leftovers(state, weights, "EAGLE")
    heads = config.get("num_attention_heads") or target_config.num_attention_heads
    head_dim = mapped["layer.q_proj.weight"].shape[0] // heads
    shape = {"num_kv_heads": mapped["layer.k_proj.weight"].shape[0] // head_dim,
             "inner": mapped["layer.gate_proj.weight"].shape[0],
             "rope_base": rope_base(SimpleNamespace(**config) if config else target_config, weights),
             "eps": config.get("rms_norm_eps", getattr(target_config, "rms_norm_eps", None))}
    return PublishedCheckpoint("eagle", "eagle-1/2", weights, config, mapped,
                               {"num_heads": heads, "fc_bias": "fc.bias" in mapped, "layer_shape": shape})


def rope_base(config, weights: Path) -> float | dict:
    """How a config's attention layers rotate, for a draft layer that rotates as the target does: the plain
    RoPE base (transformers 5 keeps it in ``rope_parameters``, 4.x and the released draft configs in
    ``rope_theta``), or, for scaled RoPE (Llama-3's ``llama3``, yarn, linear, dynamic, ...), the RoPE
    parameters plus ``max_position_embeddings``, which `layers.rope` hands to transformers' rotary class."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return float(params.get("rope_theta") or getattr(config, "rope_theta", None) or 10000.0)
    if not getattr(config, "rope_parameters", None):  # 4.x-style rope_theta + rope_scaling: transformers' own reading
        from transformers import LlamaConfig

        legacy = {k: getattr(config, k) for k in ("rope_theta", "rope_scaling") if getattr(config, k, None) is not None}
        params = LlamaConfig(**legacy).rope_parameters
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if kind not in ROPE_INIT_FUNCTIONS:
        raise SpecbenchError(f"{weights}: {kind!r} RoPE scaling is unknown to the installed transformers "
                             f"(it knows {', '.join(sorted(ROPE_INIT_FUNCTIONS))})")
    max_positions = getattr(config, "max_position_embeddings", None)
    return dict(params) | ({"max_position_embeddings": int(max_positions)} if max_positions else {})


def _take(state: dict[str, torch.Tensor], key: str, weights: Path) -> torch.Tensor:
    if key not in state:
        raise SpecbenchError(f"{weights}: key {key!r} is missing")
    return state.pop(key)


def _no_leftovers(state: dict[str, torch.Tensor], weights: Path, what: str) -> None:
    if state:
        raise SpecbenchError(f"{weights}: keys this {what} layout does not have: {', '.join(sorted(state)[:4])}")


def check_target(checkpoint: PublishedCheckpoint, hidden: int, vocab: int) -> None:
    """Refuse heads made for another model: their hidden size, and their own vocabulary, must be the target's."""
    found_hidden = next(v for k, v in checkpoint.state.items() if k.endswith("weight")).shape[0]  # [H, ...]
    if found_hidden != hidden:
        raise SpecbenchError(f"{checkpoint.weights}: heads of hidden size {found_hidden}, the target's is {hidden} "
                             f"(made for {checkpoint.config.get('base_model_name_or_path', 'another model')})")
    own = checkpoint.options.get("own_vocab", 0)
    if own and own != vocab:
        raise SpecbenchError(f"{checkpoint.weights}: heads over a vocabulary of {own} tokens, the target has {vocab} "
                             f"(made for {checkpoint.config.get('base_model_name_or_path', 'another model')})")


def full_rows(projection: torch.Tensor, row_ids: torch.Tensor | None, lm_head: torch.Tensor) -> torch.Tensor:
    """A head's own projection [V', H] as the published layouts hold it, over all V tokens [V, H]: over a
    draft vocabulary (``row_ids`` [V'], the token id of each row) its rows go to their tokens and every other
    token keeps the target's row (what the projection started from)."""
    if row_ids is None:
        return projection
    full = lm_head.detach().to(projection.device, projection.dtype).clone()
    full[row_ids.to(projection.device)] = projection
    return full


def medusa_published_state(module: torch.nn.Module, lm_head: torch.Tensor | None,
                           row_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """A `MedusaHeads` module's state in the medusa-1 layout (each head's own lm_head: the module's, over all
    V tokens, else a copy of ``lm_head`` [V, H], the target's, which is what the heads were trained with), or
    medusa-2 with neither."""
    if lm_head is None and module.lm_heads is not None:
        raise SpecbenchError("these heads have their own output projections, which the medusa-2 layout cannot "
                             "hold; export them in the medusa-1 layout (without --no-lm-heads)")
    state: dict[str, torch.Tensor] = {}
    for k, head in enumerate(module.heads):
        for l, block in enumerate(head):
            state[f"{k}.{l}.linear.weight"], state[f"{k}.{l}.linear.bias"] = block.linear.weight, block.linear.bias
        if module.lm_heads is not None:
            state[f"{k}.{len(head)}.weight"] = full_rows(module.lm_heads[k].weight, row_ids, lm_head)
        elif lm_head is not None:
            state[f"{k}.{len(head)}.weight"] = lm_head
    return state


def hydra_published_state(module: torch.nn.Module, lm_head: torch.Tensor, row_ids: torch.Tensor | None = None
                          ) -> dict[str, torch.Tensor]:
    """A `HydraHeads` module's state in the hydra-mlp layout. specbench's heads add h itself as the residual:
    written as ``res_connection`` = [I 0 ... 0] with a zero bias; the output projections are the module's
    own (over all V tokens, `full_rows`), else copies of the target's ``lm_head`` [V, H] with a zero bias."""
    if module.prefix is not None:
        raise SpecbenchError("this hydra checkpoint has a prefix attention layer (--prefix-heads), which the "
                             "published 'mlp' layout cannot hold; export a checkpoint trained without it")
    state: dict[str, torch.Tensor] = {}
    for k, head in enumerate(module.heads):
        hidden, width = head.mix.weight.shape
        if head.residual is None:
            identity = torch.zeros(hidden, width, dtype=head.mix.weight.dtype)
            identity[:, :hidden] = torch.eye(hidden, dtype=head.mix.weight.dtype)
            residual = (identity, torch.zeros(hidden, dtype=head.mix.weight.dtype))
        else:
            residual = (head.residual.weight, head.residual.bias)
        state[f"hydra_mlp.{k}.0.linear.weight"], state[f"hydra_mlp.{k}.0.linear.bias"] = head.mix.weight, head.mix.bias
        state[f"hydra_mlp.{k}.0.res_connection.weight"], state[f"hydra_mlp.{k}.0.res_connection.bias"] = residual
        for l, block in enumerate(head.blocks, start=1):
            state[f"hydra_mlp.{k}.{l}.linear.weight"] = block.linear.weight
            state[f"hydra_mlp.{k}.{l}.linear.bias"] = block.linear.bias
        if module.lm_heads is not None:
            projection = module.lm_heads[k]
            if row_ids is not None and projection.bias is not None:
                raise SpecbenchError("heads with a biased projection over a draft vocabulary cannot be exported")
            weight = full_rows(projection.weight, row_ids, lm_head)
            bias = projection.bias if projection.bias is not None else torch.zeros(weight.shape[0], dtype=weight.dtype)
            state[f"hydra_lm_head.{k}.weight"], state[f"hydra_lm_head.{k}.bias"] = weight, bias
        else:
            state[f"hydra_lm_head.{k}.weight"] = lm_head
            state[f"hydra_lm_head.{k}.bias"] = torch.zeros(lm_head.shape[0], dtype=lm_head.dtype)
    return state


def published_config(method: str, module: torch.nn.Module, base_model: str) -> dict:
    """The ``config.json`` the authors' loaders read next to the weights."""
    heads, layers = len(module.heads), (len(module.heads[0]) if method == "medusa" else 1 + len(module.heads[0].blocks))
    if method == "medusa":
        return {"medusa_num_heads": heads, "medusa_num_layers": layers, "base_model_name_or_path": base_model}
    return {"hydra_num_heads": heads, "hydra_num_layers": layers, "hydra_head_arch": "mlp", "grounded_heads": True,
            "base_model_name_or_path": base_model}


def distinct_layers(module: torch.nn.Module, method: str) -> bool:
    """Whether some head's residual blocks differ (the authors' ``[ResBlock] * L`` would keep one of them)."""
    groups = [list(head) for head in module.heads] if method == "medusa" else [list(head.blocks) for head in module.heads]
    return any(not torch.equal(a.linear.weight, b.linear.weight) or not torch.equal(a.linear.bias, b.linear.bias)
               for blocks in groups for a, b in zip(blocks, blocks[1:]))


def write_published(method: str, module: torch.nn.Module, lm_head: torch.Tensor, out: Path, base_model: str,
                    with_lm_heads: bool = True, row_ids: torch.Tensor | None = None) -> tuple[list[Path], list[str]]:
    """Write ``module`` (a loaded specbench `MedusaHeads` or `HydraHeads`) to directory ``out`` in its
    method's published layout; returns (files written, notes for the user). ``with_lm_heads`` False writes
    the medusa-2 layout (no per-head lm_head). ``row_ids`` [V']: the token ids of the rows of the module's own
    projections when they cover a draft vocabulary (`full_rows` widens them to V)."""
    out = Path(out)
    lm_head = lm_head.detach().to("cpu")
    if method == "medusa":
        state = medusa_published_state(module, lm_head if with_lm_heads else None, row_ids)
    elif method == "hydra":
        state = hydra_published_state(module, lm_head, row_ids)
    else:
        raise SpecbenchError(f"no published layout for {method} checkpoints (medusa and hydra have one)")
    out.mkdir(parents=True, exist_ok=True)
    weights = out / WEIGHT_FILES[method][0]
    torch.save({k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}, weights)
    config = out / "config.json"
    config.write_text(json.dumps(published_config(method, module, base_model), indent=2) + "\n", encoding="utf-8")
    notes = []
    if row_ids is not None and getattr(module, "lm_heads", None) is not None:
        notes.append(f"the heads' own projections cover the {len(row_ids)} most frequent tokens; the other rows are "
                     f"the target's (the authors' heads score every token)")
    if distinct_layers(module, method):
        notes.append(f"the heads' {'layers' if method == 'medusa' else 'residual blocks'} differ from each other: "
                     f"specbench reads them as written, but the authors' loader ([ResBlock] * L, one shared module) "
                     f"would keep only one copy")
    return [weights, config], notes
