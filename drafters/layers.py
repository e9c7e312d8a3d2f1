"""Small layers several drafters share: rotary position embedding and a causal context cache."""

from __future__ import annotations

import torch

ROPE_BASE = 10000.0


def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., P, heads, d] by positions [P] (rotate-half convention)."""
    half = x.shape[-1] // 2
    freqs = ROPE_BASE ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)  # [d/2]
    angles = positions.to(torch.float32)[:, None] * freqs  # [P, d/2]
    cos, sin = angles.cos()[:, None, :].to(x.dtype), angles.sin()[:, None, :].to(x.dtype)  # [P, 1, d/2]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
