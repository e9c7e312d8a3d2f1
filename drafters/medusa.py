"""medusa: K extra heads on the target's last hidden state, each guessing one token further ahead.

Head k (k = 1..K) is a residual block ``h + SiLU(W_k h + b_k)`` (W zero-initialised) followed by the
target's frozen ``lm_head`` (shared, not copied), and guesses the token k places after the root. A
proposal takes each head's top candidates and places them in a static tree of rank paths built from
the heads' measured top-k accuracies under the node budget (Medusa's cartesian placement: the rank-r
token of head d sits at every depth-d node of rank r, whatever its parent).
"""

from __future__ import annotations

import torch
from torch import nn

from specbench.drafter import DraftContext, TargetHandle
from specbench.drafters.checkpointed import CheckpointDrafter
from specbench.drafters.layers import ResBlock
from specbench.drafters.static_tree import StaticTree
from specbench.tree import DraftTree


class MedusaHeads(nn.Module):
    """K heads; ``forward(h [..., H]) -> features [K, ..., H]`` (apply the target's lm_head for logits)."""

    def __init__(self, hidden: int, num_heads: int = 4, num_layers: int = 1) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers)]) for _ in range(num_heads))

    def forward(self, h: torch.Tensor, num_heads: int | None = None) -> torch.Tensor:
        """Features of the first ``num_heads`` heads (all by default): a shallow tree needs fewer."""
        return torch.stack([head(h) for head in self.heads[:num_heads]])

    def training_features(self, h: torch.Tensor, window_embeddings: torch.Tensor) -> torch.Tensor:
        """Features [K, B, H] for hidden [B, H]; Medusa heads ignore the draft path's tokens."""
        return self(h)


class HeadDrafter(CheckpointDrafter):
    """Shared plumbing of drafters whose static tree comes from the checkpoint's measured accuracies."""

    module_class: type[nn.Module]
    #: recipe hyper-parameters passed to ``module_class`` besides hidden size, heads and layers
    module_options: tuple[str, ...] = ()

    def __init__(self, checkpoint: str | None = None, max_rank: int = 8, draft_vocab: int | None = None) -> None:
        super().__init__(checkpoint, draft_vocab)
        self.max_rank = max_rank
        self.accuracy: list[list[float]] = []
        self._trees: dict[int, StaticTree] = {}

    def build_module(self, recipe: dict, target: TargetHandle) -> nn.Module:
        config = recipe["hyperparameters"]
        options = {name: config[name] for name in self.module_options if name in config}
        return self.module_class(target.config.hidden_size, config["num_heads"], config["num_layers"], **options)

    def loaded(self, recipe: dict) -> None:
        self.accuracy = [row[: self.max_rank] for row in recipe["metrics"]["heldout_topk_accuracy"]]
        self._trees = {}

    def static_tree(self, budget: int) -> StaticTree:
        if budget not in self._trees:
            self._trees[budget] = StaticTree.from_accuracies(self.accuracy, budget)
        return self._trees[budget]

    @torch.inference_mode()
    def propose(self, ctx: DraftContext) -> DraftTree:
        h = self.head_input(ctx)  # [H], every step (a drafter may keep per-position state)
        shape = self.static_tree(ctx.budget)
        if len(shape) == 1:
            return DraftTree.root_only(ctx.root)
        return self.draft(ctx, shape, h)

    def head_input(self, ctx: DraftContext) -> torch.Tensor:
        """What the heads see [H]: the hidden state that produced the root."""
        return ctx.hidden[-1]

    def draft(self, ctx: DraftContext, shape: StaticTree, h: torch.Tensor) -> DraftTree:
        """Fill ``shape`` (more than one node) with tokens for this step from the heads' input h [H]."""
        raise NotImplementedError


class MedusaDrafter(HeadDrafter):
    """Medusa-style heads with a static tree; options: ``checkpoint`` (path stem), ``max_rank``,
    ``draft_vocab`` (score only the N most frequent tokens; 0: all; default: `DEFAULT_DRAFT_VOCAB` when the
    checkpoint stores a token ranking)."""

    method = "medusa"
    module_class = MedusaHeads

    def draft(self, ctx: DraftContext, shape: StaticTree, h: torch.Tensor) -> DraftTree:
        top = self.top_tokens(self.module(h, shape.max_depth), shape.max_rank)  # [D, R], D = tree depth <= K
        heads, ranks = shape.head_and_rank
        return shape.draft_tree(ctx.root, top.cpu()[heads, ranks])  # tokens [n - 1]
