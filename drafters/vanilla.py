"""vanilla: plain greedy decoding as the root-only tree, through the same loop, cache and kernels
as every other drafter, so speedups compare drafters and nothing else."""

from __future__ import annotations

from specbench.drafter import DraftContext, Drafter
from specbench.tree import DraftTree


class VanillaDrafter(Drafter):
    """Proposes nothing: each step verifies only the root and emits the bonus token."""

    def propose(self, ctx: DraftContext) -> DraftTree:
        return DraftTree.root_only(ctx.root)
