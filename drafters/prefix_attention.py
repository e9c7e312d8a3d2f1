"""Hydra++'s prefix attention: one causal decoder layer over the target's hidden states.

Plain Hydra heads see only the last hidden state h_t. With prefix attention they see
``h'_t = h_t + Attn(h_{<=t}) + MLP(...)``: a pre-norm self-attention layer (RoPE positions, causal) and a
SwiGLU MLP over the whole context, output projections zero-initialised so an untrained layer is the
identity. At inference the layer's keys and values are cached per sequence, so each step costs one query.

The layer trained here has an MLP 2H wide, as many key/value heads as query heads and RoPE base 10,000.
Published Hydra++ heads (``hydra_head_arch: prefix-mlp``) use a decoder layer shaped like the target's
(its MLP width, grouped key/value heads, RoPE base and norm epsilon) followed by a final RMSNorm: the
constructor's other arguments, which `published.py` fills from the target's config. EAGLE's draft layer
is the same layer without the input norm (``input_norm=False``), see `eagle.py`.
"""

from __future__ import annotations

import torch
from torch import nn

from specbench.drafters.layers import ROPE_BASE, KVCache, RMSNorm, add_attention_and_mlp, mlp_residual, rope


class PrefixAttention(nn.Module):
    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int | None = None, inner: int | None = None,
                 rope_base: float = ROPE_BASE, eps: float | None = None, final_norm: bool = False,
                 input_norm: bool = True) -> None:
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        if hidden % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"hidden size {hidden}, {num_heads} heads and {num_kv_heads} key/value heads do not divide")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, hidden // num_heads
        self.rope_base = rope_base
        self.norm = RMSNorm(hidden, eps=eps) if input_norm else nn.Identity()  # EAGLE's layer has none
        add_attention_and_mlp(self, hidden, inner or 2 * hidden, num_kv_heads * self.head_dim, eps)
        self.final_norm = RMSNorm(hidden, eps=eps) if final_norm else None

    def keys_values(self, hidden: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [P, kv_heads, d] of hidden [P, H] at sequence positions [P]."""
        normed = self.norm(hidden)
        shape = (hidden.shape[0], self.num_kv_heads, self.head_dim)
        return rope(self.k_proj(normed).view(shape), positions, self.rope_base), self.v_proj(normed).view(shape)

    def attend(self, hidden: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               mask: torch.Tensor | None) -> torch.Tensor:
        """Outputs [Q, H] for query rows hidden [Q, H] at positions [Q] over keys/values [P, kv_heads, d];
        mask: bool [Q, P] (True = visible) or None (all visible)."""
        q = rope(self.q_proj(self.norm(hidden)).view(hidden.shape[0], self.num_heads, self.head_dim), positions,
                 self.rope_base)
        group = self.num_heads // self.num_kv_heads  # query heads per key/value head
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)  # [P, heads, d]
        attended = nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1), attn_mask=mask)  # [heads, Q, d]
        out = mlp_residual(self, hidden + self.o_proj(attended.transpose(0, 1).reshape(hidden.shape)))
        return out if self.final_norm is None else self.final_norm(out)

    def forward_sequence(self, hidden: torch.Tensor) -> torch.Tensor:
        """h' [P, H] for every position of one sequence's hidden states [P, H] (causal)."""
        positions = torch.arange(hidden.shape[0], device=hidden.device)
        keys, values = self.keys_values(hidden, positions)
        causal = positions[:, None] >= positions[None, :]  # [P, P]
        return self.attend(hidden, positions, keys, values, causal)


class PrefixCache(KVCache):
    """The prefix layer's keys and values for one sequence, grown as accepted hidden states arrive."""

    def extend(self, layer: PrefixAttention, start: int, hidden: torch.Tensor, owner: str = "hydra") -> torch.Tensor:
        """Append hidden [m, H] at positions start .. start + m - 1 (start must be the cache's length);
        return h' [H] of the newest position."""
        positions = self.next_positions(start, hidden.shape[0], hidden.device, owner)
        self.append(*layer.keys_values(hidden, positions))
        return layer.attend(hidden[-1:], positions[-1:], self.keys, self.values, None)[0]
