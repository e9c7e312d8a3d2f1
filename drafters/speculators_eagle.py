"""EAGLE-1/2 (and HASS) drafts in the speculators format: read into `EagleModule`, and written from it.

Read in vllm-project/speculators at 7c50e6017349d6124c6cc384c50209dd70bfa1b9, the last commit that has the
"eagle" type (bcdc38af, "remove eagle converter and reference", took it out; c05b95b3, read for eagle3 in
`speculators.py`, no longer has it): ``src/speculators/convert/eagle/eagle_legacy_model.py``
(``EagleSpeculatorConfig``, ``EagleSpeculator``; it lived in ``src/speculators/models/eagle.py`` before),
``src/speculators/convert/eagle/eagle_converter.py`` (the authors' names -> speculators' names) and
``src/speculators/convert/eagle/utils.py`` (``detect_fusion_bias_and_layernorms``). A directory with
``config.json``:

- ``speculators_model_type`` "eagle", ``architectures`` (["EagleSpeculator", "LlamaDecoderLayer"]),
  ``speculators_version`` and the ``speculators_config`` block that eagle3 has too (algorithm "eagle");
- ``transformer_layer_architecture`` ("auto" or a decoder layer class, "LlamaDecoderLayer"),
  ``transformer_layer_config`` (a Hugging Face config; speculators' trainer stores the verifier's own, so its
  ``num_hidden_layers`` is the verifier's: the draft always has one layer), ``layernorms``, ``fusion_bias``;

and ``model.safetensors``: ``fusion_fc.weight`` [H, 2H] (+ ``fusion_fc.bias`` [H] when ``fusion_bias``; the
authors' EAGLE-1 Vicuna weights have one, converted as ``fc.bias``) and ``transformer.*``, a LLaMA decoder
layer whose ``input_layernorm`` is the identity (no weight). The embedding and lm_head are the verifier's
and are not stored. The forward is ``lm_head(layer(fusion_fc([E(x_{t+1}); f_t])))``: `EagleModule`'s
(embedding first, then the feature).

**RoPE.** The layer rotates as ``transformer_layer_config`` says (as an engine that builds the layer from that
config does). speculators' ``EagleSpeculator`` itself takes the verifier's rotary embedding; the two agree for
what speculators trains (its layer config is the verifier's) and for converted releases whose draft config
copies the target's. specbench's own trained layers rotate with base 10,000 whatever the target's: the
export records that, and ``convert`` prints `rope_note` when it differs from the target's.

Not implemented, refused with one line: ``layernorms: true`` (HASS as speculators trains it: an RMSNorm on
the embeddings before the fusion, the decoder layer's own input norm, and an RMSNorm before the lm_head),
decoder layers other than LLaMA's (``transformer_layer_architecture`` or the layer config's ``model_type``),
attention or MLP biases, an activation other than SiLU, and a head width other than hidden / heads.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch

from specbench.drafter import TargetHandle
from specbench.drafters.speculators import (
    _field,
    _weights,
    check_speculators_config,
    check_verifier,
    layer_config,
    read_json,
    speculators_header,
)
from specbench.errors import SpecbenchError

#: specbench `EagleModule` key -> the speculators key (the authors' ``fc.`` is ``fusion_fc.``, ``layers.0.`` is
#: ``transformer.``)
EAGLE_KEYS = {
    "fc.weight": "fusion_fc.weight",
    "fc.bias": "fusion_fc.bias",
    "layer.q_proj.weight": "transformer.self_attn.q_proj.weight",
    "layer.k_proj.weight": "transformer.self_attn.k_proj.weight",
    "layer.v_proj.weight": "transformer.self_attn.v_proj.weight",
    "layer.o_proj.weight": "transformer.self_attn.o_proj.weight",
    "layer.mlp_norm.weight": "transformer.post_attention_layernorm.weight",
    "layer.gate_proj.weight": "transformer.mlp.gate_proj.weight",
    "layer.up_proj.weight": "transformer.mlp.up_proj.weight",
    "layer.down_proj.weight": "transformer.mlp.down_proj.weight",
}
LAYER_CLASSES = ("auto", "LlamaDecoderLayer")


def speculators_type(directory: Path) -> str | None:
    """The ``speculators_model_type`` of a directory's config.json (None: no config, not JSON, or no such field)."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return config.get("speculators_model_type") if isinstance(config, dict) else None


def eagle_shape(config: dict, where: str, target: TargetHandle) -> dict:
    """`EagleModule` hyper-parameters (num_heads, fc_bias, layer_shape) from a speculators eagle config.json,
    checked against ``target``; a variant specbench does not implement is refused with one line."""
    from specbench.drafters.published import rope_base

    if config.get("layernorms"):
        raise SpecbenchError(f"{where}: layernorms=true (HASS with extra RMSNorms on the embeddings, the layer input "
                             f"and before the lm_head) is a speculators variant specbench's eagle does not implement")
    layer = _field(config, "transformer_layer_config", where)
    if not isinstance(layer, dict):
        raise SpecbenchError(f"{where}: transformer_layer_config must be an object")
    architecture = config.get("transformer_layer_architecture", "auto")
    model_type = layer.get("model_type", "llama")
    if architecture not in LAYER_CLASSES or model_type != "llama":
        raise SpecbenchError(f"{where}: a {architecture} draft layer of model_type {model_type!r}; specbench's eagle "
                             f"runs a LLaMA decoder layer (LlamaDecoderLayer)")
    for flag in ("attention_bias", "mlp_bias"):
        if layer.get(flag):
            raise SpecbenchError(f"{where}: {flag}=true; specbench's eagle layer has no biases in attention or MLP")
    if layer.get("hidden_act", "silu") != "silu":
        raise SpecbenchError(f"{where}: hidden_act {layer['hidden_act']!r}; specbench's eagle layer's MLP is SwiGLU (silu)")
    hidden, vocab = target.config.hidden_size, target.lm_head.weight.shape[0]
    if _field(layer, "hidden_size", where) != hidden:
        raise SpecbenchError(f"{where}: draft hidden size {layer['hidden_size']}, the target's is {hidden}")
    if layer.get("vocab_size", vocab) != vocab:
        raise SpecbenchError(f"{where}: made for a vocabulary of {layer['vocab_size']} tokens, the target has {vocab}")
    heads = _field(layer, "num_attention_heads", where)
    if not isinstance(heads, int) or heads < 1 or hidden % heads:
        raise SpecbenchError(f"{where}: num_attention_heads {heads!r} does not divide hidden size {hidden}")
    if layer.get("head_dim") not in (None, hidden // heads):
        raise SpecbenchError(f"{where}: head_dim {layer['head_dim']}; specbench's eagle layer's heads are hidden / heads "
                             f"= {hidden // heads} wide")
    return {"num_heads": heads, "fc_bias": bool(config.get("fusion_bias", False)),
            "layer_shape": {"num_kv_heads": layer.get("num_key_value_heads") or heads,
                            "inner": _field(layer, "intermediate_size", where),
                            "rope_base": rope_base(SimpleNamespace(**layer), Path(where)),
                            "eps": layer.get("rms_norm_eps", 1e-6)}}


def check_eagle_shapes(state: dict[str, torch.Tensor], hyper: dict, hidden: int, weights: Path) -> None:
    """Every tensor's shape as the config says (one line naming the first that differs)."""
    shape = hyper["layer_shape"]
    kv, inner = shape["num_kv_heads"] * (hidden // hyper["num_heads"]), shape["inner"]
    expected = {"fc.weight": (hidden, 2 * hidden), "fc.bias": (hidden,), "layer.q_proj.weight": (hidden, hidden),
                "layer.k_proj.weight": (kv, hidden), "layer.v_proj.weight": (kv, hidden),
                "layer.o_proj.weight": (hidden, hidden), "layer.mlp_norm.weight": (hidden,),
                "layer.gate_proj.weight": (inner, hidden), "layer.up_proj.weight": (inner, hidden),
                "layer.down_proj.weight": (hidden, inner)}
    for key, tensor in state.items():
        if tuple(tensor.shape) != expected[key]:
            raise SpecbenchError(f"{weights}: {EAGLE_KEYS[key]} has shape {tuple(tensor.shape)}, expected {expected[key]}")


def read_eagle_directory(directory: Path, target: TargetHandle) -> tuple[dict, dict, Path]:
    """(state dict in `EagleModule` keys, recipe, weights file) of a speculators "eagle" directory, checked
    against ``target``."""
    from specbench.drafters.published import read_state

    where = str(directory)
    config = read_json(Path(directory) / "config.json")
    block = check_speculators_config(config, where, "eagle")
    check_verifier(block, target, where)
    hyper = eagle_shape(config, where, target)
    weights = _weights(Path(directory))
    state = read_state(weights)
    mapped = {}
    for mine, theirs in EAGLE_KEYS.items():
        if mine == "fc.bias" and not hyper["fc_bias"]:
            continue
        if theirs not in state:
            raise SpecbenchError(f"{weights}: key {theirs!r} is missing" +
                                 (" (fusion_bias is true)" if mine == "fc.bias" else ""))
        mapped[mine] = state.pop(theirs)
    state.pop("embed_tokens.weight", None)  # a copy of the verifier's, if stored: the target's own is used
    for unused in [k for k in state if k.endswith("rotary_emb.inv_freq")]:
        del state[unused]
    if state:
        raise SpecbenchError(f"{weights}: keys this speculators eagle layout does not have: {', '.join(sorted(state)[:4])}"
                             + (" (fusion_bias is false)" if "fusion_fc.bias" in state else ""))
    check_eagle_shapes(mapped, hyper, target.config.hidden_size, weights)
    recipe = {"method": "eagle", "hyperparameters": hyper,
              "imported": {"layout": "speculators-eagle", "path": str(weights),
                           "base_model": block["verifier"].get("name_or_path")}}
    return mapped, recipe, weights


def rope_note(module: torch.nn.Module, target: TargetHandle) -> str | None:
    """A note when the draft layer rotates unlike the target (specbench trains its layer with RoPE base 10,000
    whatever the target's): speculators' ``EagleSpeculator`` rotates with the verifier's rotary embedding, not
    with ``transformer_layer_config``'s, so it would not compute the drafts specbench does."""
    from specbench.drafters.published import rope_base

    mine, theirs = module.layer.rope_base, rope_base(target.config, Path("target config"))
    if mine == theirs:
        return None
    return (f"the draft layer's RoPE ({mine}) is not the target's ({theirs}); config.json records the layer's, which an "
            f"engine building the layer from transformer_layer_config uses, but speculators' own EagleSpeculator "
            f"rotates with the verifier's rotary embedding and would draft differently (verification stays exact)")


def write_eagle(module: torch.nn.Module, target: TargetHandle, out: Path, base_model: str,
                speculative_tokens: int = 3) -> list[Path]:
    """Write an `EagleModule` to directory ``out`` as a speculators "eagle" directory (config.json +
    model.safetensors); returns the files. The layer's shape is read off the module itself. A norm built
    without an epsilon (torch's default: the dtype's, specbench's trained layers) is written as float32's."""
    from safetensors.torch import save_file

    layer = module.layer
    eps = layer.mlp_norm.eps if layer.mlp_norm.eps is not None else torch.finfo(torch.float32).eps
    shape = {"inner": layer.gate_proj.weight.shape[0], "num_heads": layer.num_heads, "num_kv_heads": layer.num_kv_heads,
             "head_dim": layer.head_dim, "eps": eps, "rope_base": layer.rope_base}
    fc_bias = module.fc.bias is not None
    config = speculators_header("eagle", ["EagleSpeculator", "LlamaDecoderLayer"], target, base_model,
                                speculative_tokens) | {
        "transformer_layer_architecture": "LlamaDecoderLayer",
        "transformer_layer_config": layer_config(shape, target), "layernorms": False, "fusion_bias": fc_bias}
    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in module.state_dict().items()}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    weights = out / "model.safetensors"
    save_file({EAGLE_KEYS[k]: v for k, v in state.items()}, str(weights), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return [weights, out / "config.json"]
