"""``--device-map``: accelerate's plan with the harness-facing modules pinned to the primary device, planned
here for GPUs this machine lacks; the accelerate load path on CPU gives plain greedy's ids; bad settings stop
with one line. What only several GPUs can check (activations moving between them) is in docs/scale-out.md."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Gemma3TextConfig, LlamaConfig

from specbench.errors import SpecbenchError
from specbench.placement import check_device_map, placement_plan
from specbench.results import load_run
from tests.test_cli import assert_one_line_error, cli_in_process, run_cli

GIB = 1 << 30


def save_config(config, folder):
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    return folder


def llama_folder(tmp_path, tied: bool):
    """A Llama shaped like a ~1B model (config only: the plan needs no weights)."""
    config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                         num_attention_heads=16, num_key_value_heads=4, tie_word_embeddings=tied)
    return save_config(config, tmp_path / f"llama-tied{tied}")


def gemma3_folder(tmp_path):
    config = Gemma3TextConfig(vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=256)
    config.architectures = ["Gemma3ForCausalLM"]
    return save_config(config, tmp_path / "gemma3")


def device_of(plan: dict, module: str):
    covering = [key for key in plan if key == "" or module == key or module.startswith(key + ".")]
    assert len(covering) == 1, (module, covering)  # exactly one entry places each module: no parent + child keys
    return plan[covering[0]]


def layer_devices(plan: dict, layers: int) -> list:
    return [device_of(plan, f"model.layers.{i}") for i in range(layers)]


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("gpus", [2, 4])
def test_plan_spreads_layers_in_order_and_pins_what_the_harness_touches(tmp_path, tied, gpus):
    folder = llama_folder(tmp_path, tied)
    # ~1.7 GB of bf16 weights over GPUs with 2.6 GiB in all: no single GPU holds it, nothing spills to the host
    plan = placement_plan(folder, "sequential", torch.bfloat16, max_memory={i: int(2.6 * GIB / gpus) for i in range(gpus)})
    assert set(plan.values()) <= set(range(gpus)), plan
    for module in ("model.embed_tokens", "model.norm", "model.rotary_emb", "lm_head"):
        assert device_of(plan, module) == 0
    devices = layer_devices(plan, 16)
    assert devices == sorted(devices) and len(set(devices)) > 1  # a pipeline: each GPU a run of layers


def test_balanced_plan_uses_every_gpu(tmp_path):
    plan = placement_plan(llama_folder(tmp_path, tied=True), "auto", torch.bfloat16,
                          max_memory={i: 40 * GIB for i in range(4)})
    assert set(layer_devices(plan, 16)) == {0, 1, 2, 3}  # balanced even where one GPU could hold it all
    assert device_of(plan, "lm_head") == device_of(plan, "model.embed_tokens") == 0


def test_gemma3_plan_pins_its_large_untied_vocabulary(tmp_path):
    plan = placement_plan(gemma3_folder(tmp_path), "auto", torch.bfloat16, max_memory={0: 40 * GIB, 1: 40 * GIB})
    assert device_of(plan, "lm_head") == device_of(plan, "model.embed_tokens") == device_of(plan, "model.norm") == 0
    assert set(layer_devices(plan, 26)) == {0, 1}


def test_cpu_plan_is_one_device(tmp_path):
    plan = placement_plan(llama_folder(tmp_path, tied=True), "auto", torch.float32, device="cpu")
    assert {device_of(plan, name) for name in ("model.embed_tokens", "model.layers.0", "lm_head")} == {"cpu"}


@pytest.mark.parametrize("device_map, device, distributed, fragment", [
    ("everywhere", "cuda", False, "--device-map must be one of auto, balanced, sequential"),
    ("auto", "cuda:1", False, "give --device cuda"),
    ("auto", "cuda", True, "not supported yet"),
])
def test_bad_settings_are_one_line(device_map, device, distributed, fragment):
    with pytest.raises(SpecbenchError, match=fragment.replace("-", r"\-")):
        check_device_map(device_map, device, distributed)


def test_device_map_with_one_gpu_named_is_one_line_on_the_cli(tmp_path):
    assert_one_line_error(cli_in_process("run", "--device-map", "auto", "--device", "cuda:0", "--out", str(tmp_path / "o")),
                          "--device-map")


def test_run_through_accelerate_equals_a_plain_run(tiny_model_dir, tmp_path):
    """The accelerate load path (here onto the host) gives the same ids as the plain load, for every drafter,
    and the manifest records where the parameters are."""
    common = ["run", "--model", str(tiny_model_dir), "--drafters", "vanilla,ngram", "--max-new-tokens", "12",
              "--threads", "1", "--limit", "1", "--no-progress"]
    plain = run_cli(*common, "--out", str(tmp_path / "plain"))
    mapped = run_cli(*common, "--device-map", "auto", "--out", str(tmp_path / "mapped"))
    assert plain.returncode == 0, plain.stderr
    assert mapped.returncode == 0, mapped.stderr
    runs = [load_run(tmp_path / name) for name in ("plain", "mapped")]
    for drafter in ("vanilla", "ngram"):
        ids = [[(record.question_id, record.output_ids) for record in run[drafter]] for run in runs]
        assert ids[0] == ids[1] and ids[0]
    manifest = json.loads((tmp_path / "mapped" / "manifest.json").read_text())
    assert manifest["config"]["device_map"] == "auto"
    assert list(manifest["environment"]["placement"]) == ["cpu"]
