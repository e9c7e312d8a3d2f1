"""Tree attention on a CPU with grouped-query heads: the keys and values read in place, not copied per head.

A grouped-query target (the default SmolLM2: 9 query heads over 3 key/value heads; Gemma-3 270M: 4 over 1) scores a
one-node step with SDPA's own grouping (``enable_gqa``), but transformers' ``sdpa`` attention turns that off as soon
as a mask is passed (on CUDA a masked, grouped SDPA falls back to the math kernel) and copies every layer's cached
keys and values to one per query head instead (``repeat_kv``). A verification tree always passes its tree mask, so
on a CPU every tree step paid a copy of the whole cache, 3x over, in every layer: a cost that grows with the context
while one node's does not. On a 2-core Zen 3 EPYC (`benchmarks.tree_attention`, in one process,
docs/journal/tree-attention-2026-12-03.txt) a 2-node verify cost 1.03x one node's at a 100-token context and 1.16x at
1,000 with the copy, 0.93x and 1.06x without it; 12 nodes 1.98x / 2.16x against 1.85x / 2.02x.

Terminology: the **attention kernel** of a target is ``grouped`` (this module's: a masked query of more than one
position calls SDPA with ``enable_gqa``, the keys and values as cached) or ``repeat`` (transformers' ``sdpa``
unchanged). `chosen_attention` takes ``grouped`` on a CPU and ``repeat`` elsewhere. On a CPU both give the same
bits (SDPA's CPU kernel indexes a key/value head per query head where ``repeat_kv`` copied it:
tests/test_attention.py checks equality), so exactness and every earlier run's ids are unaffected; only the time
moves. The kernel is part of a verify-cost profile's key and of every manifest.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward

KERNELS = ("grouped", "repeat")
#: the name the grouped kernel is registered under with transformers' attention and mask interfaces
GROUPED_IMPLEMENTATION = "specbench_grouped_sdpa"
TRANSFORMERS_IMPLEMENTATION = "sdpa"


def chosen_attention(device: torch.device) -> str:
    """``grouped`` on a CPU (same bits, no per-head copy), ``repeat`` (transformers' own) elsewhere."""
    return "grouped" if device.type == "cpu" else "repeat"


def grouped_sdpa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                           is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, except that a masked query of several positions over grouped key/value
    heads is scored by SDPA's own grouping instead of a per-head copy of the keys and values.

    query: [B, Hq, q, D], key / value: [B, Hkv, k, D], attention_mask: additive or boolean [B | 1, 1, q, k]
    returns: (output [B, q, Hq, D], None), as transformers' attention functions do"""
    groups = getattr(module, "num_key_value_groups", 1)
    plain = (attention_mask is None or query.shape[2] == 1 or groups == 1 or kwargs.get("position_bias") is not None
             or kwargs.get("softcap") is not None or kwargs.get("output_attentions", False))
    if plain:  # transformers' own handling (prefill's causal skip, one query's packed heads, the rest)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                            scale=scaling, enable_gqa=True)  # [B, Hq, q, D]
    return output.transpose(1, 2).contiguous(), None


def _register() -> None:
    """Make `GROUPED_IMPLEMENTATION` a name transformers resolves (attention function and mask builder)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_IMPLEMENTATION, grouped_sdpa_attention)
    if GROUPED_IMPLEMENTATION not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionMaskInterface.register(GROUPED_IMPLEMENTATION, sdpa_mask)  # the prefill's causal mask, as sdpa's


def use_attention(model, kernel: str) -> None:
    """Put ``model`` (a transformers model loaded with ``sdpa`` attention) on attention ``kernel``."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}; choose {' or '.join(KERNELS)}")
    if kernel == "grouped":
        _register()
    model.set_attn_implementation(GROUPED_IMPLEMENTATION if kernel == "grouped" else TRANSFORMERS_IMPLEMENTATION)


def attention_of(model) -> str:
    """The kernel ``model`` runs on now."""
    return "grouped" if model.config._attn_implementation == GROUPED_IMPLEMENTATION else "repeat"
