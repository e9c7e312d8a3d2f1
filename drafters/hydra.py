"""hydra: sequentially dependent heads, so each draft depth conditions on the draft path so far.

Head d (d = 1..K) guesses the token d places after the root from ``[h; E(root); E(y_1) ... E(y_{d-1})]``
(the target's last hidden state and the embeddings of the path above the new node): one
``h + SiLU(W_d [...] + b_d)`` block (W zero-initialised) then optional residual blocks, then the target's
frozen ``lm_head``. The static tree has the same rank-path shape as medusa's, but is expanded depth by
depth: every node at depth d - 1 that has children runs head d on its own path (batched per depth). The
dynamic tree (the default for specbench's checkpoints) runs head d on the best ``top_k`` nodes of depth
d - 1 by cumulative log-probability (`HeadDrafter.draft_dynamic`).
Training is teacher-forced on the target's own tokens. Hydra++ options: the teacher-distribution loss
(`specbench train hydra --loss teacher`) and a prefix-attention layer over the context's hidden states
(`--prefix-heads N`, see `prefix_attention.py`).
"""

from __future__ import annotations

import torch
from torch import nn

from specbench.drafter import DraftContext
from specbench.drafters.layers import ResBlock
from specbench.drafters.medusa import HeadDrafter, own_lm_heads
from specbench.drafters.prefix_attention import PrefixAttention, PrefixCache
from specbench.drafters.static_tree import StaticTree
from specbench.tree import DraftTree


class HydraHead(nn.Module):
    """``base + SiLU(W_d [h; E(root); ...] + b_d)`` then residual blocks; ``base`` is h, or with
    ``projected_residual`` (the published Hydra layout) a learned projection of the whole input."""

    def __init__(self, hidden: int, depth: int, num_layers: int = 1, projected_residual: bool = False) -> None:
        super().__init__()
        self.depth = depth  # tokens it sees: root, y_1 .. y_{depth-1}
        self.mix = nn.Linear(hidden * (depth + 1), hidden)
        nn.init.zeros_(self.mix.weight)
        nn.init.zeros_(self.mix.bias)
        self.residual = nn.Linear(hidden * (depth + 1), hidden) if projected_residual else None
        self.blocks = nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers - 1)])

    def forward(self, h: torch.Tensor, path_embeddings: torch.Tensor) -> torch.Tensor:
        """h [B, H], path_embeddings [B, depth, H] -> features [B, H]."""
        joined = torch.cat([h, path_embeddings.flatten(1)], dim=-1)  # [B, (depth + 1) H]
        base = h if self.residual is None else self.residual(joined)  # [B, H]
        return self.blocks(base + nn.functional.silu(self.mix(joined)))


class HydraHeads(nn.Module):
    """K sequentially dependent heads; with ``prefix_heads`` > 0, Hydra++'s prefix attention layer (that
    many attention heads) turns the context's hidden states into the heads' input first. ``own_vocab``,
    ``own_bias``, ``projected_residual`` and ``prefix_shape`` (`PrefixAttention`'s other arguments) describe
    heads imported from the published layout (`published.py`): an output projection per head instead of the
    target's lm_head, `HydraHead`'s projected residual, Hydra++'s target-shaped prefix layer."""

    def __init__(self, hidden: int, num_heads: int = 4, num_layers: int = 1, prefix_heads: int = 0,
                 own_vocab: int = 0, own_bias: bool = False, projected_residual: bool = False,
                 prefix_shape: dict | None = None) -> None:
        super().__init__()
        self.heads = nn.ModuleList(HydraHead(hidden, d + 1, num_layers, projected_residual) for d in range(num_heads))
        self.prefix = PrefixAttention(hidden, prefix_heads, **(prefix_shape or {})) if prefix_heads else None
        self.lm_heads = own_lm_heads(hidden, num_heads, own_vocab, own_bias)

    def training_features(self, h: torch.Tensor, window_embeddings: torch.Tensor, heads: list[int] | None = None
                          ) -> torch.Tensor:
        """Teacher-forced features [K', B, H] of ``heads`` (default: all K): head d sees the true root ..
        y_{d-1} (window_embeddings [B, K, H])."""
        chosen = [self.heads[k] for k in heads] if heads is not None else self.heads
        return torch.stack([head(h, window_embeddings[:, : head.depth]) for head in chosen])


class HydraDrafter(HeadDrafter):
    """Hydra-style heads; options as `MedusaDrafter`'s (``checkpoint`` may name a published Hydra checkpoint:
    its directory or ``hydra_lm_head.pt``)."""

    method = "hydra"
    module_class = HydraHeads
    module_options = ("prefix_heads", "own_vocab", "own_bias", "projected_residual", "prefix_shape")
    capturable = True

    def compile_parts(self, compile):
        """Each head (its input [F, d + 1, H]: F <= top_k frontier nodes at depth d). Hydra++'s prefix layer
        stays eager: its context grows every step."""
        for head in self.module.heads:
            head.forward = compile(head.forward)
        return [f"head {d + 1}" for d in range(len(self.module.heads))]

    def start_sequence(self) -> None:
        self.prefix_cache = PrefixCache()

    def head_input(self, ctx: DraftContext) -> torch.Tensor:
        """h [H], or with prefix attention h' [H], after the accepted hidden states extend the layer's cache."""
        if self.module.prefix is None:
            return ctx.hidden[-1]
        return self.prefix_cache.extend(self.module.prefix, ctx.first_new_position, ctx.hidden, self.name or self.method)

    def draft(self, ctx: DraftContext, shape: StaticTree, h: torch.Tensor) -> DraftTree:
        embed, device = ctx.target.embed_tokens, ctx.target.device
        tokens = torch.zeros(len(shape), dtype=torch.long)
        tokens[0] = ctx.root
        path_embeddings = {0: embed(torch.tensor([ctx.root], device=device))}  # node -> [depth + 1, H]
        for depth, parents in enumerate(shape.parents_by_depth, start=1):
            stacked = torch.stack([path_embeddings[p] for p in parents])  # [P, depth, H]
            features = self.module.heads[depth - 1](h.expand(len(parents), -1), stacked)  # [P, H]
            top = self.top_tokens(features, shape.max_rank, head=depth - 1).cpu()  # [P, R]
            children = [(child, row) for row, p in enumerate(parents) for child in shape.children[p]]
            index = torch.tensor([c for c, _ in children])
            tokens[index] = top[torch.tensor([r for _, r in children]), torch.tensor([shape.ranks[c] for c, _ in children])]
            if depth < shape.max_depth:
                new = embed(tokens[index].to(device))  # [C, H]
                for i, (child, row) in enumerate(children):
                    if shape.children[child]:
                        path_embeddings[child] = torch.cat([stacked[row], new[i : i + 1]])
        return shape.draft_tree(ctx.root, tokens[1:])

    def children(self, ctx: DraftContext, h: torch.Tensor, depth: int, paths: list[list[int]], k: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Head ``depth`` on each node's own path: root, y_1 .. y_depth."""
        ids = torch.tensor([[ctx.root] + path for path in paths], device=ctx.target.device)  # [F, depth + 1]
        features = self.module.heads[depth](h.expand(len(paths), -1), ctx.target.embed_tokens(ids))  # [F, H]
        return self.top_log_probs(features, k, head=depth)

    def children_rows(self, rows, h: torch.Tensor, depth: int, paths: list[list[list[int]]], k: int) -> list[tuple]:
        """Every row's frontier through head ``depth`` in one forward, and the shared vocabulary's scores in one
        product: nodes [N = sum of the rows' F], then each row's own context columns and top k."""
        counts = [len(row_paths) for row_paths in paths]
        target = rows[0][1].target
        ids = torch.tensor([[ctx.root] + path for (_, ctx), row_paths in zip(rows, paths) for path in row_paths],
                           device=target.device)  # [N, depth + 1]
        inputs = h.repeat_interleave(torch.tensor(counts, device=h.device), dim=0)  # [N, H]
        features = self.module.heads[depth](inputs, target.embed_tokens(ids))  # [N, H]
        cut = self.output_vocab(depth).cut_logits(features)  # [N, V']
        return [drafter.top_log_probs(part, k, head=depth, cut=cut_part)
                for (drafter, _), part, cut_part in zip(rows, features.split(counts), cut.split(counts))]
