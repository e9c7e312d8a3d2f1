"""The CTC-drafter's Attention Draft Module: one transformer decoder layer, T slots in one forward.

Context features fuse the target's last hidden state at position s with the embedding of the token that
followed it, ``u_s = W_in [h_s ; E(x_{s+1})]``; their keys and values are computed once per position and
cached across decoding steps. To draft after the root, T slot queries (learned slot embeddings added to
the last context feature ``u_last``, whose token part is the root) attend to the whole context and to
each other (bidirectionally) in one non-autoregressive forward, then pass an MLP and the slot's own residual
block. Each slot's feature goes
through the target's frozen ``lm_head`` (shared, not copied) plus one learned **blank** row, giving
logits over V + 1 classes (class V = blank). Trained with CTC loss, the slots' collapsed output is the
next N tokens after the root; the cross-entropy ablation uses the same module without the blank.

Positions: context keys are rotated (RoPE) by their sequence position s, slot j by ``s_last + 1 + j``.
Residual branches are zero-initialised and ``W_in`` starts as [I, 0], so an untrained module's slots
repeat the target's own next-token distribution.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from specbench.drafters.layers import KVCache, ResBlock, RMSNorm, add_attention_and_mlp, mlp_residual, rope


class AttentionDraftModule(nn.Module):
    """``hidden``: the target's H; ``num_slots``: T; ``blank``: add the blank class (False = CE ablation)."""

    def __init__(self, hidden: int, num_slots: int = 8, num_heads: int = 9, intermediate: int | None = None,
                 blank: bool = True, slot_blocks: bool = True) -> None:
        super().__init__()
        if hidden % num_heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {num_heads} heads")
        self.num_slots, self.num_heads = num_slots, num_heads
        self.head_dim = hidden // num_heads
        self.fuse = nn.Linear(2 * hidden, hidden, bias=False)  # W_in [h_s ; E(x_{s+1})]
        with torch.no_grad():
            self.fuse.weight.zero_()
            self.fuse.weight[:, :hidden].copy_(torch.eye(hidden))
        # [T, H]; unit scale, comparable to the target's hidden states (norm ~45 for H = 576), so slots differ
        self.slot_embeddings = nn.Parameter(torch.randn(num_slots, hidden))
        self.context_norm = RMSNorm(hidden)
        self.query_norm = RMSNorm(hidden)
        add_attention_and_mlp(self, hidden, intermediate or 2 * hidden)
        # each slot's own output block (zero-initialised), as each Medusa head has its own
        self.slot_blocks = nn.ModuleList(ResBlock(hidden) for _ in range(num_slots)) if slot_blocks else None
        self.blank = nn.Linear(hidden, 1) if blank else None  # the blank row next to the frozen lm_head
        if self.blank is not None:
            nn.init.zeros_(self.blank.weight)
            nn.init.zeros_(self.blank.bias)

    # ---- pieces shared by training and inference ---------------------------------------------------
    def context_features(self, hidden: torch.Tensor, next_embeddings: torch.Tensor) -> torch.Tensor:
        """u [..., H] from hidden [..., H] and the embeddings of the tokens that followed [..., H]."""
        return self.fuse(torch.cat([hidden, next_embeddings], dim=-1))

    def context_keys_values(self, u: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [P, heads, d] of context features u [P, H] at sequence positions [P]."""
        normed = self.context_norm(u)
        shape = (u.shape[0], self.num_heads, self.head_dim)
        return rope(self.k_proj(normed).view(shape), positions), self.v_proj(normed).view(shape)

    def slot_inputs(self, u_last: torch.Tensor) -> torch.Tensor:
        """Slot residual streams [A, T, H] for the last context features u_last [A, H] of A anchors."""
        return u_last[:, None, :] + self.slot_embeddings

    def slot_features(self, x: torch.Tensor, slot_positions: torch.Tensor, context_k: torch.Tensor,
                      context_v: torch.Tensor, context_mask: torch.Tensor | None) -> torch.Tensor:
        """One decoder layer over the slots.

        x: [A, T, H] slot streams; slot_positions: [A, T]; context_k/v: [P, heads, d] shared by all anchors;
        context_mask: bool [A, P] (True = the anchor may see that context position) or None (all).
        Slots of one anchor see each other, never another anchor's slots. Returns features [A, T, H].
        """
        a, t, h = x.shape
        normed = self.query_norm(x)
        q = rope(self.q_proj(normed).view(a * t, self.num_heads, self.head_dim), slot_positions.reshape(-1))
        sk = rope(self.k_proj(normed).view(a * t, self.num_heads, self.head_dim), slot_positions.reshape(-1))
        sv = self.v_proj(normed).view(a, t, self.num_heads, self.head_dim)
        sk = sk.view(a, t, self.num_heads, self.head_dim)
        q = q.view(a, t, self.num_heads, self.head_dim).transpose(1, 2)  # [A, heads, T, d]
        keys = torch.cat([context_k.transpose(0, 1).expand(a, -1, -1, -1), sk.transpose(1, 2)], dim=2)  # [A, heads, P+T, d]
        values = torch.cat([context_v.transpose(0, 1).expand(a, -1, -1, -1), sv.transpose(1, 2)], dim=2)
        mask = None
        if context_mask is not None:
            mask = torch.cat([context_mask, context_mask.new_ones(a, t)], dim=1)[:, None, None, :]  # [A, 1, 1, P+T]
        attended = nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [A, heads, T, d]
        x = x + self.o_proj(attended.transpose(1, 2).reshape(a, t, h))
        x = mlp_residual(self, x)
        if self.slot_blocks is None:
            return x
        return torch.stack([block(x[:, j]) for j, block in enumerate(self.slot_blocks)], dim=1)

    def logits(self, features: torch.Tensor, lm_head: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """[..., V (+1)]: the frozen lm_head's logits (or a draft vocabulary's), then the blank logit last (if any)."""
        vocab = lm_head(features)
        if self.blank is None:
            return vocab
        return torch.cat([vocab, self.blank(features).to(vocab.dtype)], dim=-1)

    # ---- training: every anchor of one sequence at once ---------------------------------------------
    def forward_sequence(self, hidden: torch.Tensor, next_embeddings: torch.Tensor, anchors: torch.Tensor,
                         starts: torch.Tensor | None = None) -> torch.Tensor:
        """Slot features [A, T, H] for anchors [A] of one sequence, or of several packed end to end.

        hidden [P, H]: hidden states of positions 0..P-1; next_embeddings [P, H]: embeddings of tokens 1..P.
        Anchor s drafts after root x_{s+1} and sees context positions 0..s. Packed sequences (one forward
        for a training step's samples, fewer kernel launches on a GPU): starts [P] holds, per row, the row
        where its sequence begins; an anchor then sees only its own sequence's rows, and RoPE positions count
        from that sequence's start, so each sequence is computed as it would be alone.
        """
        u = self.context_features(hidden, next_embeddings)  # [P, H]
        rows = torch.arange(u.shape[0], device=u.device)
        starts = torch.zeros_like(rows) if starts is None else starts.to(u.device)  # [P]
        k, v = self.context_keys_values(u, rows - starts)
        anchor_starts = starts[anchors]  # [A]
        mask = (rows[None, :] <= anchors[:, None]) & (rows[None, :] >= anchor_starts[:, None])  # [A, P]
        slot_positions = (anchors - anchor_starts)[:, None] + 1 + torch.arange(self.num_slots, device=u.device)  # [A, T]
        return self.slot_features(self.slot_inputs(u[anchors]), slot_positions, k, v, mask)


def build_module(method: str, hidden: int, num_heads: int, num_slots: int, slot_blocks: bool = True) -> AttentionDraftModule:
    """The module of ``ctc`` (with the blank class) or ``ctc-ce`` (without)."""
    return AttentionDraftModule(hidden, num_slots=num_slots, num_heads=num_heads, blank=method == "ctc",
                                slot_blocks=slot_blocks)


class ContextCache(KVCache):
    """Keys and values of the context features seen so far in one sequence (inference), and the newest
    context feature, which the slot queries start from."""

    def __init__(self) -> None:
        super().__init__()
        self.last: torch.Tensor | None = None  # u of the newest position [H]

    def extend(self, module: AttentionDraftModule, start: int, hidden: torch.Tensor, next_embeddings: torch.Tensor,
               owner: str = "ctc") -> None:
        """Append positions start .. start + m - 1 (hidden and next_embeddings [m, H]); start must be the
        cache's length."""
        u = module.context_features(hidden, next_embeddings)  # [m, H]
        self.append(*module.context_keys_values(u, self.next_positions(start, u.shape[0], u.device, owner)))
        self.last = u[-1]

    def draft_logits(self, module: AttentionDraftModule, lm_head: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Slot logits [T, V (+1)] after the newest position."""
        slot_positions = self.length + torch.arange(module.num_slots, device=self.last.device)  # [T]
        features = module.slot_features(module.slot_inputs(self.last[None]), slot_positions[None], self.keys, self.values, None)
        return module.logits(features[0], lm_head)
