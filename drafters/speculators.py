"""EAGLE-3 checkpoints as others write them: the speculators format and the authors' released layout.

**speculators** (vllm-project/speculators at c05b95b3: ``src/speculators/config.py`` ``SpeculatorModelConfig``,
``SpeculatorsConfig``, ``VerifierConfig``; ``src/speculators/models/eagle3/config.py``
``Eagle3SpeculatorConfig``; ``src/speculators/proposals/greedy.py``; key names from
``src/speculators/convert/eagle/eagle3_converter.py``, which renames the authors' ``midlayer.*`` to
``layers.0.*``). A directory with ``config.json``:

- ``speculators_model_type`` ("eagle3"), ``architectures`` (["Eagle3Speculator"]), ``speculators_version``;
- ``speculators_config``: ``algorithm``, ``proposal_methods`` (each with ``proposal_type``, for "greedy" also
  ``speculative_tokens``, ``verifier_accept_k``, ``accept_tolerance``), ``default_proposal_method`` (one of the
  proposal types), ``verifier`` {``name_or_path``, ``architectures``};
- ``transformer_layer_config``: the draft layer's Hugging Face config (``model_type`` llama, ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``, ``rms_norm_eps``, RoPE,
  ``vocab_size`` = the target's vocabulary, ``num_hidden_layers`` = 1);
- ``draft_vocab_size``, ``norm_before_residual``, ``target_hidden_size``, ``eagle_aux_hidden_state_layer_ids``
  (None: 2, N // 2, N - 3 of the verifier's N layers), ``norm_before_fc``, ``fc_norm``, ``norm_output``;

and ``model.safetensors`` with ``fc.weight``, ``layers.0.{input_layernorm, hidden_norm,
post_attention_layernorm}.weight``, ``layers.0.self_attn.{q,k,v,o}_proj.weight``,
``layers.0.mlp.{gate,up,down}_proj.weight``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d`` (and optionally
``embed_tokens.weight``, a copy of the target's, which specbench drops: it uses the target's own).

**The authors' layout** (SafeAILab/EAGLE at cb7e0841, ``eagle/model/cnets.py`` ``Model``,
``eagle/traineagle3/config.json``, ``eagle/model/ea_model.py`` loading ``pytorch_model.bin`` or
``model.safetensors``): a LLaMA-style ``config.json`` (``num_hidden_layers`` 1, ``vocab_size`` the target's,
``draft_vocab_size``, optional ``target_hidden_size``) and the same weights under ``midlayer.*`` instead of
``layers.0.*``; the feature layers are fixed in their code (2, N // 2, N - 3).

specbench does not implement speculators' ``norm_before_fc``, ``fc_norm`` or ``norm_output`` variants, nor
more than one draft layer: such directories are refused with one line, as is any directory whose shapes,
vocabulary or verifier architecture do not fit the target.

speculators' ``"eagle"`` type (EAGLE-1/2 and HASS) is read and written by `speculators_eagle.py`, for eagle.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch

from specbench.drafter import TargetHandle
from specbench.errors import SpecbenchError

#: specbench `Eagle3Module` key -> the speculators key (the authors' use ``midlayer.`` for ``layers.0.``)
EAGLE3_KEYS = {
    "fc.weight": "fc.weight",
    "layer.input_norm.weight": "layers.0.input_layernorm.weight",
    "layer.hidden_norm.weight": "layers.0.hidden_norm.weight",
    "layer.q_proj.weight": "layers.0.self_attn.q_proj.weight",
    "layer.k_proj.weight": "layers.0.self_attn.k_proj.weight",
    "layer.v_proj.weight": "layers.0.self_attn.v_proj.weight",
    "layer.o_proj.weight": "layers.0.self_attn.o_proj.weight",
    "layer.mlp_norm.weight": "layers.0.post_attention_layernorm.weight",
    "layer.gate_proj.weight": "layers.0.mlp.gate_proj.weight",
    "layer.up_proj.weight": "layers.0.mlp.up_proj.weight",
    "layer.down_proj.weight": "layers.0.mlp.down_proj.weight",
    "norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
    "d2t": "d2t",
    "t2d": "t2d",
}
WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")
UNSUPPORTED_FLAGS = ("norm_before_fc", "fc_norm", "norm_output")


def default_layer_ids(num_layers: int) -> list[int]:
    """EAGLE-3's low, middle and high layers of a target with ``num_layers`` decoder layers (2, N // 2, N - 3, as
    SafeAILab's modeling_llama_kv.py and speculators' ``resolve_target_layer_ids`` pick them); for targets too
    shallow for that (N < 6), the embeddings, the middle layer and the last layer's output."""
    if num_layers >= 6:
        return [2, num_layers // 2, num_layers - 3]
    return [0, num_layers // 2, num_layers]


def read_json(path: Path) -> dict:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SpecbenchError(f"{path}: cannot read ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise SpecbenchError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(config, dict):
        raise SpecbenchError(f"{path}: not a JSON object")
    return config


def layout_of(directory: Path) -> str | None:
    """"speculators" (a config.json with ``speculators_model_type``), "eagle3-authors" (a one-layer config.json with
    ``draft_vocab_size`` next to the authors' weight file) or None."""
    config_path = Path(directory) / "config.json"
    if not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(config, dict):
        return None
    if "speculators_model_type" in config:
        return "speculators"
    if "draft_vocab_size" in config and any((Path(directory) / name).is_file() for name in WEIGHT_NAMES):
        return "eagle3-authors"
    return None


def _weights(directory: Path) -> Path:
    for name in WEIGHT_NAMES:
        if (directory / name).is_file():
            return directory / name
    raise SpecbenchError(f"{directory}: no weights ({' or '.join(WEIGHT_NAMES)})")


def _field(config: dict, key: str, where: str):
    if key not in config:
        raise SpecbenchError(f"{where}: config.json lacks {key!r}")
    return config[key]


def check_speculators_config(config: dict, where: str, model_type: str) -> dict:
    """The ``speculators_config`` block, checked field by field (one line naming the first problem)."""
    found = config.get("speculators_model_type")
    if found != model_type:
        raise SpecbenchError(f"{where}: speculators_model_type {found!r}; this drafter reads {model_type!r} "
                             f"(eagle3.checkpoint= takes 'eagle3', eagle.checkpoint= takes 'eagle')")
    block = _field(config, "speculators_config", where)
    if not isinstance(block, dict):
        raise SpecbenchError(f"{where}: speculators_config must be an object")
    for key in ("algorithm", "proposal_methods", "default_proposal_method", "verifier"):
        _field(block, key, f"{where} (speculators_config)")
    methods = block["proposal_methods"]
    if not isinstance(methods, list) or not all(isinstance(m, dict) and "proposal_type" in m for m in methods):
        raise SpecbenchError(f"{where}: speculators_config.proposal_methods must be a list of objects with a "
                             f"proposal_type")
    if block["default_proposal_method"] not in [m["proposal_type"] for m in methods]:
        raise SpecbenchError(f"{where}: default_proposal_method {block['default_proposal_method']!r} is none of the "
                             f"proposal_methods' types {[m['proposal_type'] for m in methods]}")
    verifier = block["verifier"]
    if not isinstance(verifier, dict) or "name_or_path" not in verifier or "architectures" not in verifier:
        raise SpecbenchError(f"{where}: speculators_config.verifier needs name_or_path and architectures")
    return block


def verifier_architectures(target: TargetHandle) -> list[str]:
    """The target's ``architectures`` (its config's, else its model class name)."""
    named = getattr(target.config, "architectures", None)
    return list(named) if named else ([type(target.model).__name__] if target.model is not None else [])


def check_verifier(block: dict, target: TargetHandle, where: str) -> None:
    """Refuse a speculator made for a verifier of another architecture (when both sides name theirs)."""
    theirs = set(block["verifier"].get("architectures") or [])
    mine = set(verifier_architectures(target))
    if theirs and mine and not theirs & mine:
        raise SpecbenchError(f"{where}: made for a verifier of architecture {sorted(theirs)} "
                             f"({block['verifier'].get('name_or_path')}), the target is {sorted(mine)}")


def read_eagle3_directory(directory: Path, target: TargetHandle):
    """(state dict in `Eagle3Module` keys, recipe, weights file) of a speculators eagle3 directory or the
    authors' EAGLE-3 directory, checked against ``target``; None if ``directory`` is neither layout."""
    layout = layout_of(directory)
    if layout is None:
        return None
    from specbench.drafters.published import read_state

    where = str(directory)
    config = read_json(directory / "config.json")
    if layout == "speculators":
        block = check_speculators_config(config, where, "eagle3")
        check_verifier(block, target, where)
        for flag in UNSUPPORTED_FLAGS:
            if config.get(flag):
                raise SpecbenchError(f"{where}: {flag}=true is a speculators variant specbench's eagle3 does not implement")
        layer = _field(config, "transformer_layer_config", where)
        if not isinstance(layer, dict):
            raise SpecbenchError(f"{where}: transformer_layer_config must be an object")
        layer_ids = config.get("eagle_aux_hidden_state_layer_ids")
        draft_vocab = _field(config, "draft_vocab_size", where)
        target_hidden = config.get("target_hidden_size")
        prefix, base_model = "layers.0.", block["verifier"].get("name_or_path")
    else:
        layer, layer_ids, draft_vocab = config, None, _field(config, "draft_vocab_size", where)
        target_hidden, prefix, base_model = config.get("target_hidden_size"), "midlayer.", config.get("base_model_name_or_path")
    weights = _weights(directory)
    state = read_state(weights)
    hyper = eagle3_shape(layer, where, target, layer_ids, draft_vocab, target_hidden,
                         bool(config.get("norm_before_residual", False)))
    mapped = {}
    for mine, theirs in EAGLE3_KEYS.items():
        key = theirs.replace("layers.0.", prefix)
        if key not in state:
            raise SpecbenchError(f"{weights}: key {key!r} is missing")
        mapped[mine] = state.pop(key)
    state.pop("embed_tokens.weight", None)  # a copy of the target's: its own is used
    for unused in [k for k in state if k.endswith("rotary_emb.inv_freq")]:
        del state[unused]
    if state:
        raise SpecbenchError(f"{weights}: keys this EAGLE-3 layout does not have: {', '.join(sorted(state)[:4])}")
    check_shapes(mapped, hyper, target, weights)
    recipe = {"method": "eagle3", "hyperparameters": hyper,
              "imported": {"layout": "speculators-eagle3" if layout == "speculators" else "eagle3-authors",
                           "path": str(weights), "base_model": base_model}}
    return mapped, recipe, weights


def eagle3_shape(layer: dict, where: str, target: TargetHandle, layer_ids, draft_vocab: int, target_hidden,
                 norm_before_residual: bool) -> dict:
    """`Eagle3Module` hyper-parameters from a draft layer config, checked against the target."""
    from specbench.drafters.published import rope_base

    if layer.get("num_hidden_layers", 1) != 1:
        raise SpecbenchError(f"{where}: {layer['num_hidden_layers']} draft layers; specbench's eagle3 runs one")
    hidden, vocab = target.config.hidden_size, target.lm_head.weight.shape[0]
    if _field(layer, "hidden_size", where) != hidden:
        raise SpecbenchError(f"{where}: draft hidden size {layer['hidden_size']}, the target's is {hidden}")
    if target_hidden not in (None, hidden):
        raise SpecbenchError(f"{where}: target_hidden_size {target_hidden}, the target's is {hidden}")
    if layer.get("vocab_size", vocab) != vocab:
        raise SpecbenchError(f"{where}: made for a vocabulary of {layer['vocab_size']} tokens, the target has {vocab}")
    num_layers = target.config.num_hidden_layers
    layer_ids = list(layer_ids) if layer_ids is not None else default_layer_ids(num_layers)
    if not layer_ids or any(not isinstance(i, int) or not 0 <= i <= num_layers for i in layer_ids):
        raise SpecbenchError(f"{where}: eagle_aux_hidden_state_layer_ids {layer_ids} are not layers 0..{num_layers} "
                             f"of the target")
    if not isinstance(draft_vocab, int) or not 0 < draft_vocab <= vocab:
        raise SpecbenchError(f"{where}: draft_vocab_size {draft_vocab!r} must be 1..{vocab}")
    heads = _field(layer, "num_attention_heads", where)
    return {"num_heads": heads, "num_kv_heads": layer.get("num_key_value_heads") or heads,
            "inner": _field(layer, "intermediate_size", where), "head_dim": layer.get("head_dim") or hidden // heads,
            "rope_base": rope_base(SimpleNamespace(**layer), Path(where)), "eps": layer.get("rms_norm_eps", 1e-6),
            "draft_vocab": draft_vocab, "layer_ids": layer_ids, "norm_before_residual": norm_before_residual}


def check_shapes(state: dict[str, torch.Tensor], hyper: dict, target: TargetHandle, weights: Path) -> None:
    """Every tensor's shape as the config says (one line naming the first that differs)."""
    hidden, vocab = target.config.hidden_size, target.lm_head.weight.shape[0]
    q, kv, inner = hyper["num_heads"] * hyper["head_dim"], hyper["num_kv_heads"] * hyper["head_dim"], hyper["inner"]
    expected = {"fc.weight": (hidden, len(hyper["layer_ids"]) * hidden), "layer.input_norm.weight": (hidden,),
                "layer.hidden_norm.weight": (hidden,), "layer.q_proj.weight": (q, 2 * hidden),
                "layer.k_proj.weight": (kv, 2 * hidden), "layer.v_proj.weight": (kv, 2 * hidden),
                "layer.o_proj.weight": (hidden, q), "layer.mlp_norm.weight": (hidden,),
                "layer.gate_proj.weight": (inner, hidden), "layer.up_proj.weight": (inner, hidden),
                "layer.down_proj.weight": (hidden, inner), "norm.weight": (hidden,),
                "lm_head.weight": (hyper["draft_vocab"], hidden), "d2t": (hyper["draft_vocab"],), "t2d": (vocab,)}
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise SpecbenchError(f"{weights}: {EAGLE3_KEYS[key]} has shape {tuple(state[key].shape)}, expected {shape} "
                                 f"(fc: {len(hyper['layer_ids'])} feature layers x hidden {hidden})")


def layer_config(hyper: dict, target: TargetHandle) -> dict:
    """The draft layer's LLaMA config (what both layouts store) from `Eagle3Module` hyper-parameters."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": target.config.hidden_size,
              "intermediate_size": hyper["inner"], "num_hidden_layers": 1, "num_attention_heads": hyper["num_heads"],
              "num_key_value_heads": hyper["num_kv_heads"], "head_dim": hyper["head_dim"], "hidden_act": "silu",
              "rms_norm_eps": hyper["eps"], "vocab_size": target.lm_head.weight.shape[0], "attention_bias": False,
              "mlp_bias": False, "tie_word_embeddings": False,
              "max_position_embeddings": getattr(target.config, "max_position_embeddings", 4096)}
    rope = hyper["rope_base"]
    if isinstance(rope, dict):
        parameters = {k: v for k, v in rope.items() if k != "max_position_embeddings"}
        config |= {"rope_parameters": parameters, "rope_theta": parameters.get("rope_theta", 10000.0)}
    else:
        config |= {"rope_theta": float(rope), "rope_parameters": {"rope_type": "default", "rope_theta": float(rope)}}
    return config


def speculators_header(algorithm: str, architectures: list[str], target: TargetHandle, base_model: str,
                        speculative_tokens: int) -> dict:
    """The fields every speculators config.json opens with (`check_speculators_config` reads them back):
    the model type, the version, and the ``speculators_config`` block (greedy proposal, the verifier)."""
    return {"architectures": architectures, "speculators_model_type": algorithm, "speculators_version": "specbench",
            "speculators_config": {
                "algorithm": algorithm,
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                      "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                "default_proposal_method": "greedy",
                "verifier": {"name_or_path": base_model, "architectures": verifier_architectures(target)}}}


def write_eagle3(module, hyper: dict, target: TargetHandle, out: Path, layout: str, base_model: str,
                 speculative_tokens: int = 3) -> list[Path]:
    """Write an `Eagle3Module` (with its hyper-parameters) to directory ``out`` as ``layout`` "speculators"
    (config.json + model.safetensors) or "authors" (config.json + pytorch_model.bin); returns the files."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in module.state_dict().items()}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    layer = layer_config(hyper, target)
    if layout == "speculators":
        tensors = {EAGLE3_KEYS[k]: v for k, v in state.items()}
        config = speculators_header("eagle3", ["Eagle3Speculator"], target, base_model, speculative_tokens) | {
            "transformer_layer_config": layer, "draft_vocab_size": hyper["draft_vocab"],
            "norm_before_residual": bool(hyper.get("norm_before_residual", False)),
            "target_hidden_size": None, "eagle_aux_hidden_state_layer_ids": list(hyper["layer_ids"]),
            "norm_before_fc": False, "fc_norm": False, "norm_output": False, "embed_requires_grad": False}
        weights = out / "model.safetensors"
        save_file(tensors, str(weights), metadata={"format": "pt"})
    elif layout == "authors":
        if list(hyper["layer_ids"]) != default_layer_ids(target.config.num_hidden_layers):
            raise SpecbenchError(f"the authors' layout has no field for feature layers {hyper['layer_ids']} (their code "
                                 f"reads 2, N // 2, N - 3); export it --to speculators")
        if hyper.get("norm_before_residual"):
            raise SpecbenchError("the authors' layout has no norm_before_residual; export it --to speculators")
        tensors = {EAGLE3_KEYS[k].replace("layers.0.", "midlayer."): v for k, v in state.items()}
        config = layer | {"draft_vocab_size": hyper["draft_vocab"], "base_model_name_or_path": base_model}
        weights = out / "pytorch_model.bin"
        torch.save(tensors, weights)
    else:
        raise SpecbenchError(f"unknown EAGLE-3 layout {layout!r} (speculators or authors)")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return [weights, out / "config.json"]
