"""A static draft-tree shape given as rank paths (Medusa's "choices"), shared by medusa and hydra.

A rank path ``(r1, ..., rd)`` is the node reached by taking the r1-th best candidate at depth 1, then
the r2-th best at depth 2, and so on. The shape is chosen greedily from measured accuracies:
``accuracy[d][r]`` = P(the rank-r candidate at depth d+1 is the target's token), and a node's value is
the product of its path's accuracies (its probability of being accepted, assuming independence). Nodes
are taken best first until the budget is used, so every node's parent is taken before it and node
indices are already in the DraftTree order.

The independence assumption does not hold (an easy position is easy at every depth), yet trees built
from the measured joint rank paths, or grown node by node to maximise `decode_walk_tau`, accepted no
more on held-out prompts or on MT-bench (docs/performance.md, "Is the tree shape the lever?").
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import torch

from specbench.errors import SpecbenchError
from specbench.metrics import decode_walk
from specbench.tree import DraftTree


@dataclass(frozen=True)
class StaticTree:
    """paths[i]: rank path of node i (node 0 = root = ()); parents, depths, ranks per node."""

    paths: tuple[tuple[int, ...], ...]
    parents: tuple[int, ...]

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]]) -> "StaticTree":
        ordered = [()] + sorted({tuple(p) for p in paths if p}, key=lambda p: (len(p), p))
        index = {path: i for i, path in enumerate(ordered)}
        missing = [p for p in ordered[1:] if p[:-1] not in index]
        if missing:
            raise ValueError(f"rank paths without their parent: {missing[:3]}")
        return cls(tuple(ordered), tuple([-1] + [index[p[:-1]] for p in ordered[1:]]))

    @classmethod
    def from_accuracies(cls, accuracy: Sequence[Sequence[float]], budget: int) -> "StaticTree":
        """The ``budget``-node tree (root included) of highest total acceptance probability."""
        depth_limit, ranks = len(accuracy), len(accuracy[0]) if accuracy else 0
        chosen: list[tuple[int, ...]] = [()]
        frontier = [(-accuracy[0][r], (r,)) for r in range(ranks)] if depth_limit else []
        heapq.heapify(frontier)
        while frontier and len(chosen) < budget:
            negative, path = heapq.heappop(frontier)
            chosen.append(path)
            if len(path) < depth_limit:
                for r in range(ranks):
                    heapq.heappush(frontier, (negative * accuracy[len(path)][r], path + (r,)))
        index = {path: i for i, path in enumerate(chosen)}
        return cls(tuple(chosen), tuple([-1] + [index[p[:-1]] for p in chosen[1:]]))

    def __len__(self) -> int:
        return len(self.paths)

    @cached_property
    def depths(self) -> list[int]:
        return [len(p) for p in self.paths]

    @cached_property
    def ranks(self) -> list[int]:
        """Rank of each node among its siblings' candidates (root: 0)."""
        return [p[-1] if p else 0 for p in self.paths]

    @cached_property
    def head_and_rank(self) -> tuple[torch.Tensor, torch.Tensor]:
        """LongTensors[n - 1]: for each non-root node, its depth - 1 (the head that proposes it) and rank."""
        return torch.tensor(self.depths[1:]) - 1, torch.tensor(self.ranks[1:])

    @cached_property
    def children(self) -> dict[int, list[int]]:
        """Node -> its children's node indices."""
        out: dict[int, list[int]] = {i: [] for i in range(len(self))}
        for i, p in enumerate(self.parents[1:], start=1):
            out[p].append(i)
        return out

    @cached_property
    def parents_by_depth(self) -> list[list[int]]:
        """For depth d = 1..max_depth, the nodes at depth d - 1 that have children."""
        children = self.children
        return [[i for i, path in enumerate(self.paths) if len(path) == d - 1 and children[i]]
                for d in range(1, self.max_depth + 1)]

    @cached_property
    def max_depth(self) -> int:
        return max(self.depths)

    @cached_property
    def max_rank(self) -> int:
        return max(self.ranks) + 1

    def expected_accepted(self, accuracy: Sequence[Sequence[float]]) -> float:
        """Expected accepted length (drafts + bonus) under the independence assumption: 1 + sum of path
        probabilities (every node's probability of being on the accepted path, summed)."""
        total = 1.0
        for path in self.paths[1:]:
            p = 1.0
            for depth, rank in enumerate(path):
                p *= accuracy[depth][rank]
            total += p
        return total

    def draft_tree(self, root: int, tokens: torch.Tensor) -> DraftTree:
        """A DraftTree of this shape; ``tokens``: LongTensor[n - 1], the non-root nodes' tokens."""
        tree = DraftTree(torch.cat([torch.tensor([root], dtype=torch.long), tokens.to("cpu", torch.long)]),
                         torch.tensor(self.parents, dtype=torch.long))
        tree._parents_list = list(self.parents)
        tree._depths = list(self.depths)
        return tree


def matched_depth(ranks: Sequence[int], nodes: set[tuple[int, ...]]) -> int:
    """Depth of the deepest node in ``nodes`` whose rank path begins ``ranks`` (a position's true ranks by
    depth, -1 = not a candidate): the drafts greedy verification accepts there."""
    depth = 0
    while depth < len(ranks) and ranks[depth] >= 0 and tuple(ranks[: depth + 1]) in nodes:
        depth += 1
    return depth


def decode_walk_tau(paths: Sequence[Sequence[int]], rank_sequences: Sequence[Sequence[Sequence[int]]]) -> float:
    """Tokens per step of a static tree of rank ``paths`` decoding measured sequences, as the loop would.

    rank_sequences: per sample, for each position t, the rank of the true token at depths 1..D of a
    draft rooted there (candidates at depth d taken given the true tokens above, as hydra's are; medusa's
    ignore them), -1 where it is not a candidate or the sample has ended; one position per token after
    the first (a step at the last token's position would have nothing to emit). A step at t accepts the
    deepest node whose rank path begins the position's ranks, plus the bonus token, and the next step
    starts after them. Unlike the mean over all positions, this weights positions as decoding visits
    them: hard stretches get a step per token, easy ones are skipped, so it is lower (and it is what a
    greedy replay of these sequences measures)."""
    nodes = {tuple(p) for p in paths}
    tokens = steps = 0
    for sequence in rank_sequences:
        # per step: the accepted drafts and the bonus; where the answer ends, no bonus past its last token
        sample_tokens, sample_steps = decode_walk(
            len(sequence), lambda i, sequence=sequence: min(matched_depth(sequence[i], nodes) + 1, len(sequence) - i))
        tokens, steps = tokens + sample_tokens, steps + sample_steps
    return tokens / max(steps, 1)


TREES = Path(__file__).resolve().parent / "trees"
#: the published tree imported Medusa/Hydra heads use unless told otherwise (Medusa's fallback, Hydra's default)
DEFAULT_CHOICES = "mc_sim_7b_63"


def load_choices(spec: str) -> list[tuple[int, ...]]:
    """Rank paths ("choices") from a shipped tree name (``drafters/trees/NAME.json``: mc_sim_7b_63,
    vicuna_7b_stage2) or a JSON file holding a list of paths (or ``{"choices": [...]}``). The order matters:
    a budget of n nodes keeps the first n - 1 paths, so every path must come after its parent (the
    published lists are ordered best first)."""
    path = TREES / f"{spec}.json" if (TREES / f"{spec}.json").is_file() else Path(spec)
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in TREES.glob("*.json")))
        raise SpecbenchError(f"choices={spec}: neither a shipped tree ({shipped}) nor a file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SpecbenchError(f"choices={spec}: not JSON ({error})") from None
    raw = data.get("choices") if isinstance(data, dict) else data
    if not isinstance(raw, list) or not raw or not all(
            isinstance(p, list) and p and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in p) for p in raw):
        raise SpecbenchError(f"choices={spec}: expected a non-empty list of rank paths like [[0], [0, 0], [1]]")
    choices, seen = [tuple(p) for p in raw], {()}
    for choice in choices:
        if choice[:-1] not in seen:
            raise SpecbenchError(f"choices={spec}: path {list(choice)} comes before its parent {list(choice[:-1])}")
        if choice in seen:
            raise SpecbenchError(f"choices={spec}: path {list(choice)} is listed twice")
        seen.add(choice)
    return choices
