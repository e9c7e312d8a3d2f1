"""sps (draft-model speculative decoding): lossless on tiny random models with every kind of draft model
(another random model of the same vocabulary, the target itself, its first layer, its int8 copy), the draft
cache rolled back correctly under every accepted length, and bad options as one-line errors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import EOS, PROMPTS, build_tiny_model, make_target, plain_greedy
from specbench.drafters.sps import SpSDrafter, _check_same_tokenizer
from specbench.errors import DrafterOptionError
from specbench.harness.loop import generate
from specbench.registry import create_drafter

pytestmark = pytest.mark.usefixtures("single_thread")

MAX_NEW = 24


def drafts_for(target):
    """name -> sps drafter over ``target``: a perfect draft, a bad one, two self-drafts."""
    return {
        "target-itself": SpSDrafter(model=target.model, depth=3),
        "other-random-model": SpSDrafter(model=build_tiny_model("llama", seed=7), depth=4),
        "first-layer": SpSDrafter(self_draft="layers:1", depth=2),
        "int8": SpSDrafter(self_draft="int8", depth=5),
    }


@pytest.mark.parametrize("draft", ["target-itself", "other-random-model", "first-layer", "int8"])
@pytest.mark.parametrize("budget", [2, 4, 8])
def test_sps_equals_greedy(tiny_target, reference, draft, budget):
    if draft == "other-random-model" and type(tiny_target.model).__name__ != "LlamaForCausalLM":
        pytest.skip("the second random model is a Llama; one architecture is enough")
    drafter = drafts_for(tiny_target)[draft]
    for prompt in PROMPTS:
        result = generate(tiny_target, drafter, prompt, MAX_NEW, budget)
        assert result.output_ids == reference(prompt, MAX_NEW)
    if draft == "target-itself":  # a perfect draft: every step but the last accepts the whole chain
        assert all(a == min(3, budget - 1) + 1 for a in result.accept_lengths[:-1])


class CheckedSpS(SpSDrafter):
    """Checks after every draft forward that the incrementally cached logits equal a fresh forward over
    everything the cache claims to hold: a wrong rollback shows up at once."""

    def _next_logits(self, tokens, device):
        logits = super()._next_logits(tokens, device)
        with torch.inference_mode():
            fresh = self._draft(input_ids=torch.tensor([self._cached])).logits[0, -1]
        assert self._cache.get_seq_length() == len(self._cached)
        torch.testing.assert_close(logits, fresh, rtol=1e-4, atol=1e-4)
        self.lengths_seen.add(len(tokens))
        return logits


@pytest.mark.parametrize("seed", [3, 7, 11])
def test_the_draft_cache_rolls_back_to_the_accepted_prefix(llama_target, seed):
    """A draft that is often but not always right, so steps accept lengths from 0 to the whole chain."""
    draft_model = build_tiny_model("llama", seed=seed)
    with torch.no_grad():  # mix the target into the draft: partly right, partly wrong
        for mine, theirs in zip(draft_model.parameters(), llama_target.model.parameters()):
            mine.mul_(0.15).add_(0.85 * theirs)
    drafter = CheckedSpS(model=draft_model, depth=4)
    drafter.lengths_seen = set()
    accepted = set()
    for prompt in PROMPTS:
        result = generate(llama_target, drafter, prompt, 40, 5)
        assert result.output_ids == plain_greedy(llama_target.model, prompt, 40, llama_target.eos_ids)
        accepted |= {a - 1 for a in result.accept_lengths[:-1]}
    assert {0, 4} <= accepted and len(accepted) >= 4, accepted  # rejected at once, part of the chain, all of it


def test_sps_is_registered_and_runs_on_the_target_it_is_given(llama_target):
    drafter = create_drafter("sps", self_draft="layers:1", depth=3)
    result = generate(llama_target, drafter, PROMPTS[0], 8, 4)
    assert len(result.output_ids) == 8
    assert "layers:1" in drafter.identity()


@pytest.mark.parametrize("options, message", [
    ({"depth": 0}, "depth must be at least 1"),
    ({"model": "no/such/model.gguf"}, "draft model not found"),
    ({"self_draft": "layers:0"}, "self_draft must be 'int8' or 'layers:N'"),
    ({"self_draft": "fp4"}, "self_draft must be"),
])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(DrafterOptionError, match=message):
        create_drafter("sps", **options)


def test_too_many_layers_and_a_foreign_vocabulary_are_refused(llama_target):
    with pytest.raises(DrafterOptionError, match="only 2 layers"):
        SpSDrafter(self_draft="layers:2").reset(llama_target.handle)
    small = build_tiny_model("llama")
    small.resize_token_embeddings(EOS)  # one token fewer
    with pytest.raises(DrafterOptionError, match="output tokens"):
        SpSDrafter(model=small).reset(llama_target.handle)


def test_a_different_tokenizer_is_named():
    class Tok(SimpleNamespace):
        def get_vocab(self):
            return self.vocab

    with pytest.raises(DrafterOptionError, match="tokenizer differs"):
        _check_same_tokenizer(Tok(vocab={"a": 0, "b": 1}), Tok(vocab={"a": 0, "c": 1}), "draft.gguf")
    _check_same_tokenizer(Tok(vocab={"a": 0}), Tok(vocab={"a": 0}), "draft.gguf")  # equal: no error


def test_the_int8_self_draft_is_quantized_on_the_weight_left_target(llama_target):
    """The target's layers run weight-left (specbench.linear); quantize_dynamic matches nn.Linear by exact
    type, so the int8 copy must be made from a torch-kernel copy, or it would silently stay float32."""
    drafter = SpSDrafter(self_draft="int8", depth=2)
    drafter.reset(llama_target.handle)
    linears = [m for m in drafter._draft.modules() if isinstance(m, torch.nn.Linear)]
    assert not linears, f"{len(linears)} float linear layers left in the int8 draft"
    assert any("quantized" in type(m).__module__ for m in drafter._draft.modules())
    assert llama_target.linear_kernel == "weight-left"  # the target itself is untouched by the copy
    assert all(type(m).__name__ == "WeightLeftLinear" for m in llama_target.model.modules()
               if isinstance(m, torch.nn.Linear))


def test_the_int8_self_draft_of_a_bfloat16_target_drafts(llama_target):
    """A bf16 target's int8 copy is quantized from float32 weights (quantize_dynamic takes nothing else) and
    drafts; verification stays the bf16 target's, so the output is that target's greedy decoding."""
    target = make_target(build_tiny_model("llama").to(torch.bfloat16))
    drafter = SpSDrafter(self_draft="int8", depth=3)
    drafter.reset(target.handle)
    assert any("quantized" in type(m).__module__ for m in drafter._draft.modules())
    for prompt in PROMPTS[:2]:
        result = generate(target, drafter, prompt, 12, 4)
        assert result.output_ids == generate(target, create_drafter("vanilla"), prompt, 12, 1).output_ids
