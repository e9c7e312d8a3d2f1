"""EAGLE-2's dynamic draft tree as data: candidates gathered level by level, then the budget's best.

Each candidate is a token with its parent candidate (-1: the root) and a score, the sum of the draft's
log-probabilities along its path. A child's score never exceeds its parent's. So taking the n best scores
(ties: shallower first, then earlier) always takes every chosen node's parent too, and listing the
chosen in creation order puts parents before children: the DraftTree order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

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


class TreeLayer(Protocol):
    """What `grow` needs of a feature-level draft layer (eagle's, eagle3's). ``inputs`` is the layer's own
    per-node input (eagle: the fused x [F, H]; eagle3: x [F, 2H] with its residual), opaque to `grow`."""

    def node_inputs(self, tokens: torch.Tensor, parent_features: torch.Tensor) -> Any:
        """The layer's inputs for nodes with tokens [F] whose parents predicted parent_features [F, H]."""

    def node_keys_values(self, inputs: Any, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [F, kv_heads, d] of the nodes at positions [F]."""

    def node_attend(self, inputs: Any, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
        """Predicted features [F, H] of the nodes attending keys/values [P, kv_heads, d] under mask [F, P]."""


def grow(layer: TreeLayer, root: int, root_feature: torch.Tensor, cache_keys: torch.Tensor, cache_values: torch.Tensor,
         log_probs: Callable[[torch.Tensor], torch.Tensor], token_ids: Callable[[torch.Tensor], torch.Tensor],
         budget: int, k: int, depth: int, root_position: int) -> DraftTree:
    """EAGLE-2's dynamic tree over a draft layer: the DraftTree of the ``budget - 1`` best candidates.

    The root's predicted feature root_feature [H] scores ``k`` depth-1 candidates; each of up to ``depth``
    expansions runs the ``k`` best frontier nodes through ``layer`` in one batch, each attending to the
    accepted cache (cache_keys/values [C, kv_heads, d]) and its own ancestors, at draft position
    ``root_position + level``; each proposes ``k`` children scored parent + log p. ``log_probs`` maps
    features [n, H] to draft log-probabilities [n, V']; ``token_ids`` maps draft indices to target ids."""
    if budget < 2:
        return DraftTree.root_only(root)
    device = root_feature.device
    candidates = Candidates()
    top = log_probs(root_feature[None])[0].topk(k)
    frontier = candidates.add(token_ids(top.indices).cpu(), top.values.cpu(), [-1] * k)
    parent_features = {i: root_feature for i in frontier}  # candidate -> its parent's predicted feature
    tree_keys: list[torch.Tensor] = []
    tree_values: list[torch.Tensor] = []
    tree_row: dict[int, int] = {}  # expanded candidate -> its row among the tree's keys/values
    for level in range(min(depth, budget - 2)):
        tokens = torch.tensor([candidates.tokens[i] for i in frontier], device=device)
        inputs = layer.node_inputs(tokens, torch.stack([parent_features[i] for i in frontier]))
        positions = torch.full((len(frontier),), root_position + level, device=device)
        keys, values = layer.node_keys_values(inputs, positions)
        for row, index in enumerate(frontier, start=len(tree_row)):
            tree_row[index] = row
        tree_keys.append(keys)
        tree_values.append(values)
        visible = torch.zeros(len(frontier), len(tree_row), dtype=torch.bool, device=device)  # [F, T]
        for row, index in enumerate(frontier):
            visible[row, [tree_row[a] for a in candidates.ancestors(index)]] = True
        mask = torch.cat([torch.ones(len(frontier), cache_keys.shape[0], dtype=torch.bool, device=device), visible], 1)
        out = layer.node_attend(inputs, positions, torch.cat([cache_keys, *tree_keys]),
                                torch.cat([cache_values, *tree_values]), mask)  # [F, H] predicted features
        top = log_probs(out).topk(k)  # [F, k]
        scores = torch.tensor([candidates.scores[i] for i in frontier])[:, None] + top.values.cpu()  # [F, k]
        children = candidates.add(token_ids(top.indices).flatten().cpu(), scores.flatten(),
                                  [i for i in frontier for _ in range(k)])
        for child, parent_row in zip(children, [r for r in range(len(frontier)) for _ in range(k)]):
            parent_features[child] = out[parent_row]
        frontier = candidates.best(children, k)
    return candidates.tree(root, budget)
