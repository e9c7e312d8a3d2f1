"""specbench.attention: the grouped kernel gives transformers' sdpa bits (so exactness and earlier runs' ids hold),
a CPU target runs on it, and the kernel is named in a profile's key and a manifest."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from conftest import build_tiny_model, make_target
from specbench.attention import GROUPED_IMPLEMENTATION, attention_of, chosen_attention, grouped_sdpa_attention, use_attention
from specbench.harness.autobudget.profile import cache_path, profile_key, rewind, tree_of_size

pytestmark = pytest.mark.usefixtures("single_thread")


def tree_mask(queries: int, keys: int, generator: torch.Generator, boolean: bool) -> torch.Tensor:
    """A [1, 1, q, k] mask as a tree step builds one: the prefix visible, a random ancestor pattern (each node sees
    itself) over the last ``queries`` keys; additive (0 / dtype-min) unless ``boolean``."""
    visible = torch.ones(queries, keys, dtype=torch.bool)
    pattern = torch.rand(queries, queries, generator=generator) < 0.5
    visible[:, keys - queries:] = torch.tril(pattern) | torch.eye(queries, dtype=torch.bool)
    if boolean:
        return visible[None, None]
    return torch.zeros(1, 1, queries, keys).masked_fill(~visible, torch.finfo(torch.float32).min)


@settings(max_examples=60, deadline=None)
@given(queries=st.integers(1, 20), past=st.integers(0, 300), groups=st.sampled_from([1, 2, 3, 4]),
       kv_heads=st.sampled_from([1, 3]), head_dim=st.sampled_from([8, 64]), boolean=st.booleans(),
       masked=st.booleans(), seed=st.integers(0, 2**16))
def test_grouped_kernel_gives_the_bits_of_transformers_sdpa(queries, past, groups, kv_heads, head_dim, boolean, masked,
                                                            seed):
    generator = torch.Generator().manual_seed(seed)
    keys = past + queries
    query = torch.randn(1, kv_heads * groups, queries, head_dim, generator=generator)  # [B, Hq, q, D]
    key = torch.randn(1, kv_heads, keys, head_dim, generator=generator)  # [B, Hkv, k, D]
    value = torch.randn(1, kv_heads, keys, head_dim, generator=generator)
    mask = tree_mask(queries, keys, generator, boolean) if masked else None
    module = SimpleNamespace(num_key_value_groups=groups, is_causal=True)
    ours, _ = grouped_sdpa_attention(module, query, key, value, mask, scaling=head_dim ** -0.5)
    theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=head_dim ** -0.5)
    assert ours.shape == (1, queries, kv_heads * groups, head_dim)
    assert torch.equal(ours, theirs)  # not close: equal, so a tree step's logits are what they were under sdpa


def test_grouped_kernel_uses_the_mask():
    """The grouped path is taken (a mask, several queries, grouped heads) and the mask matters in it: dropping it
    changes the output, so the equality above is not two unmasked products agreeing."""
    generator = torch.Generator().manual_seed(3)
    query = torch.randn(1, 6, 5, 8, generator=generator)
    key, value = torch.randn(2, 1, 2, 12, 8, generator=generator)
    mask = tree_mask(5, 12, generator, boolean=False)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True)
    masked, _ = grouped_sdpa_attention(module, query, key, value, mask)
    unmasked, _ = grouped_sdpa_attention(module, query, key, value, None)
    assert not torch.allclose(masked, unmasked)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_a_tree_step_scores_the_same_bits_under_either_kernel(arch):
    target = make_target(build_tiny_model(arch))
    assert target.attention_kernel == "grouped" and attention_of(target.model) == "grouped"
    assert target.config._attn_implementation == GROUPED_IMPLEMENTATION
    prompt = torch.tensor([3, 9, 27, 81, 50, 12, 44, 7] * 6)  # [48] past the gemma3 model's sliding window
    cache = target.new_cache()
    target.prefill(prompt, cache)
    with torch.inference_mode():
        for nodes, shape in ((2, "chain"), (6, "bushy"), (13, "bushy")):
            tree = tree_of_size(nodes, shape)
            scored = {}
            for kernel in ("grouped", "repeat"):
                use_attention(target.model, kernel)
                scored[kernel] = target.forward_tree(tree, cache)  # (logits [n, V], hidden [n, H])
                rewind(cache, len(prompt))
            assert torch.equal(scored["grouped"][0], scored["repeat"][0])
            assert torch.equal(scored["grouped"][1], scored["repeat"][1])
    use_attention(target.model, "grouped")


def test_the_kernel_rule_and_where_it_is_recorded():
    assert chosen_attention(torch.device("cpu")) == "grouped"
    assert chosen_attention(torch.device("cuda", 0)) == "repeat"  # a masked grouped SDPA falls back to math there
    target = make_target(build_tiny_model("llama"))
    key = profile_key(target)
    assert key["attention"] == "grouped"
    assert cache_path(key, Path("/c")).name.endswith("-grouped.json")  # never read as a profile timed with copies
    assert cache_path(key | {"attention": "repeat"}, Path("/c")).name == cache_path(
        {k: v for k, v in key.items() if k != "attention"}, Path("/c")).name  # transformers' kernel: the old names
    with pytest.raises(ValueError, match="unknown attention kernel"):
        use_attention(target.model, "flash")
