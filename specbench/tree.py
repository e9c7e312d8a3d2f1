"""`DraftTree`: the data every drafter hands to the verifier (the tree as data, as in Medusa).

Node 0 is the root: the token the target already chose, not yet in the KV cache; ``parents[0] == -1`` and
every other node's parent has a smaller index, so one pass in index order visits parents before children.
A chain is ``parents[i] == i - 1``; vanilla decoding is the root-only tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from specbench.errors import SpecbenchError


def path_from_root(parents: Sequence[int], node: int) -> list[int]:
    """Node indices from the top of a parent-pointer forest (a node whose parent is negative) down to ``node``,
    inclusive: a tree's root path, or a candidate list's ancestry (``drafters.dynamic_tree``)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@dataclass
class DraftTree:
    """A tree of draft tokens rooted at the target's last choice.

    tokens:  LongTensor[n]   token id of each node (node 0 = root)
    parents: LongTensor[n]   parent index of each node (-1 for the root)
    probs:   Tensor[n, V] | None  for drafters that *sample* their proposals: ``probs[i]`` is the draft
             distribution q that node i's children were drawn from (rows of leaves are ignored). None
             (every built-in drafter) marks deterministic drafts. Greedy verification ignores it.
    draws:   how sampled children were drawn from ``probs[i]``: "independent" (with replacement) or
             "without_replacement" (each draw from q with the earlier siblings removed)
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    probs: torch.Tensor | None = None
    draws: str = "independent"
    _parents_list: list[int] | None = field(default=None, repr=False, compare=False)
    _depths: list[int] | None = field(default=None, repr=False, compare=False)
    _children: list[list[int]] | None = field(default=None, repr=False, compare=False)

    # ---- constructors -------------------------------------------------------------------------------
    @classmethod
    def root_only(cls, root: int) -> "DraftTree":
        return cls(torch.tensor([root], dtype=torch.long), torch.tensor([-1], dtype=torch.long))

    @classmethod
    def chain(cls, root: int, drafts: Sequence[int]) -> "DraftTree":
        """Root followed by ``drafts`` in a single line."""
        n = 1 + len(drafts)
        tokens = torch.tensor([root, *drafts], dtype=torch.long)
        return cls(tokens, torch.arange(-1, n - 1, dtype=torch.long))

    @classmethod
    def from_sequences(cls, root: int, sequences: Sequence[Sequence[int]], budget: int | None = None) -> "DraftTree":
        """Prefix tree (trie) of candidate continuations after ``root``.

        Shared prefixes become shared nodes; sequences are inserted in the given order (put the most
        likely first) and insertion stops once ``budget`` nodes (root included) are used, so a sequence
        may be truncated to the part that fits.
        """
        tokens, parents = [root], [-1]
        children: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
        for seq in sequences:
            node = 0
            for tok in seq:
                key = (node, int(tok))
                child = children.get(key)
                if child is None:
                    if budget is not None and len(tokens) >= budget:
                        break
                    child = len(tokens)
                    children[key] = child
                    tokens.append(int(tok))
                    parents.append(node)
                node = child
        tree = cls(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long))
        tree._parents_list = parents
        return tree

    # ---- structure ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def parents_list(self) -> list[int]:
        if self._parents_list is None:
            self._parents_list = self.parents.tolist()
        return self._parents_list

    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents_list))

    def depths(self) -> list[int]:
        """Depth of each node (root = 0): the position offset it is verified at."""
        if self._depths is None:
            depth = [0] * len(self)
            for i, p in enumerate(self.parents_list):
                if p >= 0:
                    depth[i] = depth[p] + 1
            self._depths = depth
        return self._depths

    def children(self) -> list[list[int]]:
        """Each node's children, in index order (the order drafters rank them, most likely first)."""
        if self._children is None:
            kids: list[list[int]] = [[] for _ in range(len(self))]
            for i, p in enumerate(self.parents_list):
                if p >= 0:
                    kids[p].append(i)
            self._children = kids
        return self._children

    def max_depth(self) -> int:
        return max(self.depths())

    def ancestor_mask(self) -> torch.Tensor:
        """BoolTensor[n, n]: ``mask[i, j]`` is True when node j is node i or one of its ancestors."""
        n = len(self)
        mask = torch.eye(n, dtype=torch.bool)
        for i, p in enumerate(self.parents_list):
            if p >= 0:
                mask[i] |= mask[p]
        return mask

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root to ``node``, inclusive."""
        return path_from_root(self.parents_list, node)

    def validate(self, root: int, budget: int) -> None:
        """Raise `SpecbenchError` naming the first broken rule of the tree contract."""
        if self.tokens.dim() != 1 or self.parents.dim() != 1 or self.tokens.shape != self.parents.shape:
            raise SpecbenchError(
                f"draft tree: tokens and parents must be 1-D of equal length, got {tuple(self.tokens.shape)} "
                f"and {tuple(self.parents.shape)}"
            )
        n = len(self)
        if n < 1 or n > budget:
            raise SpecbenchError(f"draft tree has {n} nodes; it must have between 1 and the budget {budget}")
        if int(self.tokens[0]) != root:
            raise SpecbenchError(f"draft tree root is token {int(self.tokens[0])}, expected the target's {root}")
        for i, p in enumerate(self.parents_list):
            if (i == 0 and p != -1) or (i > 0 and not 0 <= p < i):
                raise SpecbenchError(f"draft tree node {i} has parent {p}; parents must precede their children")
        if self.probs is not None and (self.probs.dim() != 2 or self.probs.shape[0] != n):
            raise SpecbenchError(f"draft tree probs must be Tensor[n, V] with n = {n} nodes, got {tuple(self.probs.shape)}")
        if self.draws not in ("independent", "without_replacement"):
            raise SpecbenchError(f"draft tree draws must be 'independent' or 'without_replacement', got {self.draws!r}")
