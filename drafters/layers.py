"""Small layers several drafters share: a zero-initialised residual block and rotary position embedding."""

from __future__ import annotations

import torch
from torch import nn

ROPE_BASE = 10000.0


class ResBlock(nn.Module):
    """``h + SiLU(W h + b)``; zero-initialised so an untrained block is the identity."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + nn.functional.silu(self.linear(h))


def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., P, heads, d] by positions [P] (rotate-half convention)."""
    half = x.shape[-1] // 2
    freqs = ROPE_BASE ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)  # [d/2]
    angles = positions.to(torch.float32)[:, None] * freqs  # [P, d/2]
    cos, sin = angles.cos()[:, None, :].to(x.dtype), angles.sin()[:, None, :].to(x.dtype)  # [P, 1, d/2]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
