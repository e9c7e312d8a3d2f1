"""Small pieces several drafters share: a zero-initialised residual block, the projections of one decoder
layer, the compiled regime's split of an EAGLE-style draft layer, a per-sequence key/value cache and rotary
position embedding."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import torch
from torch import nn

ROPE_BASE = 10000.0


class RMSNorm(nn.RMSNorm):
    """`nn.RMSNorm` computed in its weight's dtype. Under a CPU bf16 autocast (training with ``dtype
    bfloat16``) a bf16 input meets the fp32 master weight, and torch falls back from its fused kernel with a
    warning; CUDA's autocast already runs norms in fp32. At inference input and weight share a dtype (no-op)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.to(self.weight.dtype))


class ResBlock(nn.Module):
    """``h + SiLU(W h + b)``; zero-initialised so an untrained block is the identity."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + nn.functional.silu(self.linear(h))


def add_attention_and_mlp(module: nn.Module, hidden: int, inner: int, kv_width: int | None = None,
                          eps: float | None = None) -> None:
    """Give ``module`` the projections of one pre-norm decoder layer: q/k/v/o (no bias; k and v ``kv_width``
    wide, fewer than ``hidden`` for grouped-query attention), ``mlp_norm`` (RMSNorm with ``eps``) and a SwiGLU
    MLP of width ``inner``; the output projections o and down start at zero, so the layer starts as the
    identity. Attributes, not a submodule, so checkpoints name them ``q_proj``, ``down_proj``, ..."""
    module.q_proj = nn.Linear(hidden, hidden, bias=False)
    module.k_proj = nn.Linear(hidden, kv_width or hidden, bias=False)
    module.v_proj = nn.Linear(hidden, kv_width or hidden, bias=False)
    module.o_proj = nn.Linear(hidden, hidden, bias=False)
    module.mlp_norm = RMSNorm(hidden, eps=eps)
    module.gate_proj = nn.Linear(hidden, inner, bias=False)
    module.up_proj = nn.Linear(hidden, inner, bias=False)
    module.down_proj = nn.Linear(inner, hidden, bias=False)
    nn.init.zeros_(module.o_proj.weight)
    nn.init.zeros_(module.down_proj.weight)


def mlp_residual(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``x + down(SiLU(gate(n)) * up(n))`` with ``n = mlp_norm(x)``, for a module set up by `add_attention_and_mlp`."""
    normed = module.mlp_norm(x)
    return x + module.down_proj(nn.functional.silu(module.gate_proj(normed)) * module.up_proj(normed))


def compile_draft_layer(layer: nn.Module, compile: Callable[[Callable], Callable]) -> list[str]:
    """Compile an EAGLE-style draft layer's two halves in place: keys/values of new rows and attention of new rows
    over the draft cache (whose length grows: dynamo makes it symbolic). Their names, for `Drafter.compile_parts`."""
    layer.keys_values = compile(layer.keys_values)
    layer.attend = compile(layer.attend)
    return ["layer keys/values", "layer attention"]


class KVCache:
    """Keys and values [P, heads, d] of one sequence's positions 0..P-1, grown as accepted positions arrive."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0

    def next_positions(self, start: int, count: int, device: torch.device, owner: str) -> torch.Tensor:
        """Positions [count] of rows that begin at sequence position ``start``; refuses a gap or overlap."""
        if start != self.length:
            raise RuntimeError(f"{owner}: cache out of step (call reset before each sequence)")
        return torch.arange(start, start + count, device=device)

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys = keys if self.keys is None else torch.cat([self.keys, keys])
        self.values = values if self.values is None else torch.cat([self.values, values])
        self.length += keys.shape[0]


def rope(x: torch.Tensor, positions: torch.Tensor, base: float | dict = ROPE_BASE) -> torch.Tensor:
    """Rotate x [..., P, heads, d] by positions [P] (rotate-half convention). ``base`` is a plain RoPE base
    (frequencies base^(-2i/d)), or a target's RoPE parameters (transformers' ``rope_parameters``: any
    ``rope_type``, llama3, yarn, linear, dynamic, ..., plus ``max_position_embeddings``), which transformers'
    own rotary embedding class turns into cos/sin exactly as the target's attention layers get them."""
    if isinstance(base, dict):
        cos, sin = _rotary(json.dumps(base, sort_keys=True), x.shape[-1])(x, positions[None])  # [1, P, d] each
        cos, sin = cos[0, :, None, :], sin[0, :, None, :]  # [P, 1, d]
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin
    half = x.shape[-1] // 2
    freqs = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)  # [d/2]
    angles = positions.to(torch.float32)[:, None] * freqs  # [P, d/2]
    cos, sin = angles.cos()[:, None, :].to(x.dtype), angles.sin()[:, None, :].to(x.dtype)  # [P, 1, d/2]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@functools.lru_cache(maxsize=16)
def _rotary(parameters: str, head_dim: int) -> nn.Module:
    """transformers' rotary embedding for RoPE parameters (JSON) and a head width: the Llama class, which reads
    ``rope_parameters`` through transformers' ``ROPE_INIT_FUNCTIONS`` (and updates dynamic RoPE as it goes)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    values = json.loads(parameters)
    max_positions = values.pop("max_position_embeddings", None)
    config = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, head_dim=head_dim, rope_parameters=values,
                         **({"max_position_embeddings": max_positions} if max_positions else {}))
    return LlamaRotaryEmbedding(config)
