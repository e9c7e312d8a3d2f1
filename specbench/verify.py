"""Greedy verification of a draft tree: the one place acceptance is decided.

Terminology (used everywhere in specbench):

- **proposed**: the non-root nodes of the draft tree a drafter returns for one step.
- **accepted**: proposed nodes on the longest root-to-node path whose every token equals the target's
  argmax at its parent. The root is always on the path (it is the target's own choice).
- **bonus**: the target's argmax at the last accepted node: one token the target gives for free each step.
- **emitted**: what a step appends to the output: the accepted tokens, then the bonus (cut at EOS or at
  ``max_new_tokens``). A step's *accepted length* is the number of tokens it emitted, so vanilla
  decoding has accepted length 1 and tau (mean accepted length) 1.0.

Because every emitted token is the target's own argmax given exactly the tokens before it, the output
ids equal plain greedy decoding token for token (in exact arithmetic; in fp32 the tree forward and the
one-token forward agree on the argmax, which the lossless tests check).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbench.tree import DraftTree


@dataclass
class VerifyOutcome:
    """The result of verifying one draft tree.

    path:   node indices of the accepted path, root first (``path[0] == 0``)
    bonus:  the target's argmax at ``path[-1]``
    hidden: Tensor[len(path), H]: target last-layer hidden states (after the final norm) at the path's
            nodes; the last row is the one that produced the bonus
    tokens: token ids of the path's nodes, root first
    """

    path: list[int]
    bonus: int
    hidden: torch.Tensor
    tokens: list[int]

    @property
    def accepted(self) -> int:
        """Number of accepted proposed tokens (the root is not counted)."""
        return len(self.path) - 1


def greedy_path(tree: DraftTree, target_argmax: list[int]) -> list[int]:
    """Longest accepted root-to-node path given the target's argmax at every node.

    A node is accepted when its parent is accepted and its token equals the target's argmax at the
    parent. Ties in depth keep the lowest index (siblings with equal tokens are duplicates anyway).
    """
    tokens = tree.tokens.tolist()
    parents = tree.parents_list
    depth_of = {0: 0}
    best, best_depth = 0, 0
    for i in range(1, len(tokens)):
        p = parents[i]
        if p in depth_of and tokens[i] == target_argmax[p]:
            d = depth_of[p] + 1
            depth_of[i] = d
            if d > best_depth:
                best, best_depth = i, d
    return tree.path_to(best)


def verify_greedy(tree: DraftTree, logits: torch.Tensor, hidden: torch.Tensor) -> VerifyOutcome:
    """Accept the longest path that greedy decoding would have produced.

    logits: Tensor[n, V]  target logits at each tree node
    hidden: Tensor[n, H]  target hidden states at each tree node
    """
    target_argmax = logits.argmax(dim=-1).tolist()  # [n]
    path = greedy_path(tree, target_argmax)
    index = torch.tensor(path, dtype=torch.long, device=hidden.device)
    tokens = tree.tokens.tolist()
    return VerifyOutcome(
        path=path,
        bonus=target_argmax[path[-1]],
        hidden=hidden.index_select(0, index),
        tokens=[tokens[i] for i in path],
    )
