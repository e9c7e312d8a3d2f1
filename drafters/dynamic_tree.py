"""EAGLE-2's dynamic draft tree as data: candidates gathered level by level, then the budget's best.

Each candidate is a token with its parent candidate (-1: the root) and a score, the sum of the draft's
log-probabilities along its path. A child's score never exceeds its parent's. So taking the n best scores
(ties: shallower first, then earlier) always takes every chosen node's parent too, and listing the
chosen in creation order puts parents before children: the DraftTree order.
"""

from __future__ import annotations

import torch

from specbench.tree import DraftTree


class Candidates:
    """Every candidate drafted this step: ``tokens``, ``parents`` (candidate index, -1 = root), ``scores``
    (cumulative log-probability) and ``depths`` (1 = child of the root), in creation order."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.scores: list[float] = []
        self.depths: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, tokens: torch.Tensor, scores: torch.Tensor, parents: list[int]) -> list[int]:
        """Add candidates (tokens [n], cumulative scores [n], parent indices, -1 for the root); their indices."""
        first = len(self.tokens)
        self.tokens += tokens.tolist()
        self.scores += scores.tolist()
        self.parents += parents
        self.depths += [1 if p < 0 else self.depths[p] + 1 for p in parents]
        return list(range(first, len(self.tokens)))

    def best(self, indices: list[int], k: int) -> list[int]:
        """The ``k`` best-scored of ``indices`` (ties: earlier first): the next frontier to expand."""
        return sorted(indices, key=lambda i: (-self.scores[i], i))[:k]

    def worth_expanding(self, indices: list[int], budget: int) -> list[int]:
        """Those of ``indices`` whose children could still be among the tree's ``budget - 1`` candidates.

        A child scores at most its parent, and later candidates only raise the bar: once ``budget - 1``
        candidates score strictly more than a node, none of its descendants can be chosen. Skipping its
        expansion leaves the tree unchanged and saves the drafter's forward (a whole depth when none is left).
        """
        drafts = budget - 1
        if len(self.scores) < drafts:
            return indices
        bar = sorted(self.scores, reverse=True)[drafts - 1]  # the (budget - 1)-th best score so far
        return [i for i in indices if self.scores[i] >= bar]

    def ancestors(self, index: int) -> list[int]:
        """The candidate's path from the root's child down to itself."""
        path = []
        while index >= 0:
            path.append(index)
            index = self.parents[index]
        return path[::-1]

    def tree(self, root: int, budget: int) -> DraftTree:
        """The DraftTree of the ``budget - 1`` best candidates (root included in the budget)."""
        ranked = sorted(range(len(self)), key=lambda i: (-self.scores[i], self.depths[i], i))
        chosen = sorted(ranked[: max(0, budget - 1)])  # creation order: parents before children
        node = {index: position + 1 for position, index in enumerate(chosen)}
        parents = [-1] + [0 if self.parents[i] < 0 else node[self.parents[i]] for i in chosen]
        tokens = [root] + [self.tokens[i] for i in chosen]
        return DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long))
