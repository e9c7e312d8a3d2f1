"""eagle and the speculators format: a speculators "eagle" directory built from the published field names
reads into specbench's eagle and computes what a LLaMA decoder layer gives; a specbench eagle checkpoint
converted to it (the library call and ``specbench convert --to speculators``) and read back drafts the same
trees, and ids equal plain greedy decoding; malformed or unsupported directories are refused with one line.

The layout is built here from the published names, not from specbench's writer: vllm-project/speculators at
7c50e6017349d6124c6cc384c50209dd70bfa1b9 (src/speculators/convert/eagle/eagle_legacy_model.py
``EagleSpeculatorConfig``: speculators_model_type "eagle", architectures, transformer_layer_architecture,
transformer_layer_config, layernorms, fusion_bias, speculators_config; ``EagleSpeculator``: ``fusion_fc``
(bias iff fusion_bias), ``transformer`` a LlamaDecoderLayer whose input_layernorm is the identity, embed_tokens
and lm_head the verifier's, not saved; src/speculators/convert/eagle/eagle_converter.py: ``fc.`` ->
``fusion_fc.``, ``layers.0.`` -> ``transformer.``).
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import PROMPTS, assert_imported_eagle_layer, plain_greedy, recorded
from specbench.checkpoint import save_checkpoint, target_identity
from specbench.drafters.eagle import EagleDrafter, EagleModule
from specbench.drafters.speculators_eagle import rope_note, write_eagle
from specbench.errors import SpecbenchError

pytestmark = pytest.mark.usefixtures("single_thread")


def eagle_checkpoint(stem, handle, seed=4, ranking=None):
    """A specbench eagle checkpoint as training writes it (fc with bias, MHA layer with an MLP 2H wide, no
    norm epsilon), random weights large enough that attention matters; ``ranking`` a vocabulary ranking."""
    torch.manual_seed(seed)
    module = EagleModule(handle.config.hidden_size, handle.config.num_attention_heads)
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter, std=0.2)
    state = module.state_dict() | ({} if ranking is None else {"vocab_ranking": ranking})
    save_checkpoint(stem, state, {"method": "eagle", "target": target_identity(handle),
                                  "hyperparameters": {"num_heads": handle.config.num_attention_heads}}, torch.float32)
    return stem


@pytest.fixture(scope="module")
def stem(tmp_path_factory, llama_target):
    return eagle_checkpoint(tmp_path_factory.mktemp("eagle") / "eagle", llama_target.handle)


def test_round_trip_drafts_identically_and_stays_exact(llama_target, stem, tmp_path):
    """specbench -> speculators -> specbench, and written again from what was read: the same files, trees, ids."""
    original = EagleDrafter(checkpoint=str(stem))
    original.reset(llama_target.handle)
    write_eagle(original.module, llama_target.handle, tmp_path / "a", "tiny")
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle" and config["fusion_bias"] and not config["layernorms"]
    assert sorted(load_file(str(tmp_path / "a" / "model.safetensors"))) == sorted(
        ["fusion_fc.weight", "fusion_fc.bias"] + [f"transformer.{name}.weight" for name in (
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")])
    loaded = EagleDrafter(checkpoint=str(tmp_path / "a"))
    loaded.reset(llama_target.handle)
    assert loaded.recipe["imported"]["layout"] == "speculators-eagle"
    write_eagle(loaded.module, llama_target.handle, tmp_path / "b", "tiny")
    assert json.loads((tmp_path / "b" / "config.json").read_text()) == config
    first, again = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert all(torch.equal(first[k], again[k]) for k in first)
    grown = 0
    for prompt in PROMPTS[:3]:
        for budget in (4, 12):
            want = recorded(original, llama_target, prompt, budget)
            assert recorded(loaded, llama_target, prompt, budget) == want
            assert want[0] == plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)
            grown = max([grown] + [len(tokens) for tokens, _ in want[1]])
    assert grown > 3  # real trees were compared, not root-only ones


def test_a_layer_rotating_unlike_the_target_gets_a_note(llama_target):
    """specbench trains its layer with RoPE base 10,000; speculators' EagleSpeculator would rotate with the target's."""
    assert rope_note(EagleModule(32, 4), llama_target.handle) is None  # the tiny Llama's base is 10,000 too
    note = rope_note(EagleModule(32, 4, layer_shape={"rope_base": 500000.0}), llama_target.handle)
    assert "(500000.0) is not the target's (10000.0)" in note and "EagleSpeculator" in note


LAYER_KEYS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def published(target_config, seed=5, fusion_bias=True):
    """(speculators config.json, weights, fusion Linear, reference LLaMA layer) of an EAGLE draft for the tiny
    Llama: grouped-query attention (2 key/value heads), MLP 48 wide, eps 1e-5; the layer config is the
    verifier's own with those changes (speculators' trainer stores the verifier's, num_hidden_layers included)."""
    from transformers import LlamaModel

    layer = target_config.to_dict() | {"intermediate_size": 48, "rms_norm_eps": 1e-5}
    torch.manual_seed(seed)
    reference = LlamaModel(target_config.__class__.from_dict(layer | {"num_hidden_layers": 1})).eval()
    reference.layers[0].input_layernorm = torch.nn.Identity()  # layernorms=False: the layer's input norm is the identity
    reference.norm = torch.nn.Identity()  # and no norm before the lm_head
    with torch.no_grad():
        for parameter in reference.layers[0].parameters():
            parameter.normal_(0.0, 0.2)
        reference.layers[0].post_attention_layernorm.weight.normal_(1.0, 0.2)
    fc = torch.nn.Linear(2 * target_config.hidden_size, target_config.hidden_size, bias=fusion_bias)
    weights = {f"fusion_fc.{k}": v.detach() for k, v in fc.state_dict().items()}
    weights |= {f"transformer.{k}.weight": reference.layers[0].state_dict()[f"{k}.weight"] for k in LAYER_KEYS}
    config = {"architectures": ["EagleSpeculator", "LlamaDecoderLayer"], "speculators_model_type": "eagle",
              "speculators_version": "0.1.0",
              "speculators_config": {"algorithm": "eagle",
                                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 5,
                                                           "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                                     "default_proposal_method": "greedy",
                                     "verifier": {"name_or_path": "tiny-llama", "architectures": ["LlamaForCausalLM"]}},
              "transformer_layer_architecture": "LlamaDecoderLayer", "transformer_layer_config": layer,
              "layernorms": False, "fusion_bias": fusion_bias}
    return config, weights, fc, reference


def write_dir(folder, config, weights):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("fusion_bias", [True, False])
def test_published_names_compute_the_llama_layer_and_stay_exact(llama_target, tmp_path, fusion_bias):
    config, weights, fc, reference = published(llama_target.config, fusion_bias=fusion_bias)
    weights["embed_tokens.weight"] = torch.randn(97, 32)  # a stored copy of the verifier's: dropped
    drafter = EagleDrafter(checkpoint=str(write_dir(tmp_path / "spec", config, weights)), top_k=3, depth=2)
    drafter.reset(llama_target.handle)
    layer = drafter.module.layer
    assert (layer.num_kv_heads, layer.gate_proj.weight.shape[0], layer.mlp_norm.eps) == (2, 48, 1e-5)
    assert (drafter.module.fc.bias is not None) == fusion_bias
    assert_imported_eagle_layer(drafter, llama_target, fc, reference)


def refusal(drafter, target) -> str:
    with pytest.raises(SpecbenchError) as error:
        drafter.reset(target.handle)
    message = str(error.value)
    assert "\n" not in message
    return message


def changed(config, **layer):
    return config | {"transformer_layer_config": config["transformer_layer_config"] | layer}


@pytest.mark.parametrize("change, expected", [
    (lambda c, w: (c | {"speculators_model_type": "mlp_speculator"}, w), "speculators 'mlp_speculator' directory"),
    (lambda c, w: (c | {"layernorms": True}, w), "layernorms=true"),
    (lambda c, w: (c | {"transformer_layer_architecture": "Qwen3DecoderLayer"}, w), "a Qwen3DecoderLayer draft layer"),
    (lambda c, w: (changed(c, model_type="qwen3"), w), "model_type 'qwen3'"),
    (lambda c, w: (changed(c, attention_bias=True), w), "attention_bias=true"),
    (lambda c, w: (changed(c, hidden_act="gelu"), w), "hidden_act 'gelu'"),
    (lambda c, w: (changed(c, hidden_size=64), w), "draft hidden size 64, the target's is 32"),
    (lambda c, w: (changed(c, vocab_size=32000), w), "vocabulary of 32000 tokens, the target has 97"),
    (lambda c, w: (changed(c, head_dim=16), w), "head_dim 16"),
    (lambda c, w: (changed(c, intermediate_size=64), w), "transformer.mlp.gate_proj.weight has shape (48, 32)"),
    (lambda c, w: ({k: v for k, v in c.items() if k != "transformer_layer_config"}, w),
     "lacks 'transformer_layer_config'"),
    (lambda c, w: (c | {"speculators_config": c["speculators_config"] | {
        "verifier": {"name_or_path": "q", "architectures": ["Qwen3ForCausalLM"]}}}, w), "architecture ['Qwen3ForCausalLM']"),
    (lambda c, w: (c, {k: v for k, v in w.items() if k != "transformer.mlp.up_proj.weight"}),
     "key 'transformer.mlp.up_proj.weight' is missing"),
    (lambda c, w: (c, {k: v for k, v in w.items() if k != "fusion_fc.bias"}),
     "'fusion_fc.bias' is missing (fusion_bias is true)"),
    (lambda c, w: (c | {"fusion_bias": False}, w), "does not have: fusion_fc.bias (fusion_bias is false)"),
    (lambda c, w: (c, w | {"transformer.input_layernorm.weight": torch.ones(32)}),
     "does not have: transformer.input_layernorm.weight"),
])
def test_unsupported_or_malformed_directories_are_refused_with_one_line(llama_target, tmp_path, change, expected):
    config, weights = change(*published(llama_target.config)[:2])
    folder = write_dir(tmp_path / "bad", config, weights)
    assert expected in refusal(EagleDrafter(checkpoint=str(folder)), llama_target)


def test_each_drafter_names_the_one_that_reads_the_directory(llama_target, tmp_path):
    from specbench.drafters.eagle3 import Eagle3Drafter
    from specbench.drafters.medusa import MedusaDrafter

    folder = write_dir(tmp_path / "spec", *published(llama_target.config)[:2])
    assert "speculators_model_type 'eagle'; this drafter reads 'eagle3'" in \
        refusal(Eagle3Drafter(checkpoint=str(folder)), llama_target)
    assert f"load it with --drafter-option eagle.checkpoint={folder}" in \
        refusal(MedusaDrafter(checkpoint=str(folder)), llama_target)
    config = json.loads((folder / "config.json").read_text()) | {"speculators_model_type": "eagle3"}
    (folder / "config.json").write_text(json.dumps(config))
    assert f"load it with --drafter-option eagle3.checkpoint={folder}" in \
        refusal(EagleDrafter(checkpoint=str(folder)), llama_target)


def test_cli_converts_to_speculators_and_the_run_reads_it(tiny_model_dir, tmp_path):
    """``specbench convert --to speculators`` on a checkpoint with a draft-vocabulary ranking: the note, the files,
    a run from the directory equal to vanilla; the other layout and the default --to are refused in one line."""
    from specbench.model import load_target
    from specbench.results import load_run
    from test_cli import assert_one_line_error, run_cli

    handle = load_target(str(tiny_model_dir)).handle
    vocab = handle.lm_head.weight.shape[0]
    eagle_checkpoint(tmp_path / "mine", handle, ranking=torch.randperm(vocab, generator=torch.Generator().manual_seed(1)).int())
    converted = run_cli("convert", str(tmp_path / "mine"), "--model", str(tiny_model_dir), "--to", "speculators",
                        "--out", str(tmp_path / "spec"))
    assert converted.returncode == 0, converted.stderr
    assert "note: the speculators format has no draft vocabulary" in converted.stdout
    assert json.loads((tmp_path / "spec" / "config.json").read_text())["speculators_model_type"] == "eagle"
    ran = run_cli("run", "--model", str(tiny_model_dir), "--categories", "writing", "--limit", "1", "--max-new-tokens",
                  "8", "--bench", "mt_bench", "--no-progress", "--no-warmup", "--tree-budget", "8", "--drafters",
                  "vanilla,eagle", "--drafter-option", f"eagle.checkpoint={tmp_path / 'spec'}", "--out", str(tmp_path / "run"))
    assert ran.returncode == 0, ran.stderr
    assert load_run(tmp_path / "run")["eagle"][0].equal_to_vanilla
    assert_one_line_error(run_cli("convert", str(tmp_path / "mine"), "--model", str(tiny_model_dir), "--out",
                                  str(tmp_path / "authors")), "write it --to speculators")
