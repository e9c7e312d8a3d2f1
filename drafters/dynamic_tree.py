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

from specbench.tree import DraftTree, path_from_root


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
        return path_from_root(self.parents, index)

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


class Growth:
    """One sequence's EAGLE-2 tree in the making (`grow`'s state), advanced level by level from outside, so
    that several rows of a batch can run each level's draft-layer forward and scoring together (`grow_rows`).

    Per level: `request` gives the frontier's tokens [F], their parents' predicted features [F, H] and the
    draft positions [F]; `attention` takes the level's new keys/values [F, kv_heads, d] and gives every key and
    value the frontier attends to ([C + T], the accepted cache then the tree so far) with its mask [F, C + T];
    `take` takes the predicted features [F, H] and their draft log-probabilities [F, V'] and picks the next
    frontier. `tree` is the budget's best candidates. ``log_probs(features [n, H], cut)`` is the row's own
    scoring: draft log-probabilities [n, V'], ``cut`` the shared vocabulary's logits of those features when a
    batch computed them for all its rows (else None)."""

    def __init__(self, root: int, root_feature: torch.Tensor, cache_keys: torch.Tensor, cache_values: torch.Tensor,
                 log_probs: Callable[..., torch.Tensor], token_ids: Callable[[torch.Tensor], torch.Tensor],
                 budget: int, k: int, depth: int, root_position: int) -> None:
        self.root, self.root_feature, self.token_ids, self.budget, self.k = root, root_feature, token_ids, budget, k
        self.log_probs = log_probs
        self.cache_keys, self.cache_values, self.root_position = cache_keys, cache_values, root_position
        self.levels = min(depth, budget - 2)  # expansions left
        self.level = 0
        self.candidates = Candidates()
        self.frontier: list[int] = []
        self.parent_features: dict[int, torch.Tensor] = {}  # candidate -> its parent's predicted feature [H]
        self.tree_keys: list[torch.Tensor] = []
        self.tree_values: list[torch.Tensor] = []
        self.tree_row: dict[int, int] = {}  # expanded candidate -> its row among the tree's keys/values

    def take_root(self, log_probs: torch.Tensor) -> None:
        """The root's draft log-probabilities [V'] (of ``root_feature``): its ``k`` children."""
        top = log_probs.topk(self.k)
        self.frontier = self.candidates.add(self.token_ids(top.indices).cpu(), top.values.cpu(), [-1] * self.k)
        self.parent_features = {i: self.root_feature for i in self.frontier}

    def request(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(tokens [F], parent features [F, H], positions [F]) of the next level, or None when grown."""
        if self.level >= self.levels:
            return None
        device = self.root_feature.device
        tokens = torch.tensor([self.candidates.tokens[i] for i in self.frontier], device=device)
        parents = torch.stack([self.parent_features[i] for i in self.frontier])
        return tokens, parents, torch.full((len(self.frontier),), self.root_position + self.level, device=device)

    def attention(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The level's keys/values [F, kv_heads, d] added to the tree's; (keys [C + T, kv_heads, d], values, mask
        bool [F, C + T]: the accepted cache and each node's own ancestors)."""
        for row, index in enumerate(self.frontier, start=len(self.tree_row)):
            self.tree_row[index] = row
        self.tree_keys.append(keys)
        self.tree_values.append(values)
        device, frontier = keys.device, self.frontier
        visible = torch.zeros(len(frontier), len(self.tree_row), dtype=torch.bool, device=device)  # [F, T]
        for row, index in enumerate(frontier):
            visible[row, [self.tree_row[a] for a in self.candidates.ancestors(index)]] = True
        cached = torch.ones(len(frontier), self.cache_keys.shape[0], dtype=torch.bool, device=device)
        return (torch.cat([self.cache_keys, *self.tree_keys]), torch.cat([self.cache_values, *self.tree_values]),
                torch.cat([cached, visible], 1))

    def take(self, out: torch.Tensor, log_probs: torch.Tensor) -> None:
        """The level's predicted features [F, H] and their draft log-probabilities [F, V']: each node's ``k``
        children, scored parent + log p, and the ``k`` best of them as the next frontier."""
        top = log_probs.topk(self.k)  # [F, k]
        frontier, k = self.frontier, self.k
        scores = torch.tensor([self.candidates.scores[i] for i in frontier])[:, None] + top.values.cpu()  # [F, k]
        children = self.candidates.add(self.token_ids(top.indices).flatten().cpu(), scores.flatten(),
                                       [i for i in frontier for _ in range(k)])
        for child, parent_row in zip(children, [r for r in range(len(frontier)) for _ in range(k)]):
            self.parent_features[child] = out[parent_row]
        self.frontier = self.candidates.best(children, k)
        self.level += 1

    def tree(self) -> DraftTree:
        return self.candidates.tree(self.root, self.budget)


def grow(layer: TreeLayer, growth: Growth) -> DraftTree:
    """EAGLE-2's dynamic tree over a draft layer: the DraftTree of ``growth``'s ``budget - 1`` best candidates.

    The root's predicted feature [H] scores ``k`` depth-1 candidates; each of up to ``depth`` expansions runs the
    ``k`` best frontier nodes through ``layer`` in one batch, each attending to the accepted cache and its own
    ancestors, at draft position ``root_position + level``; each proposes ``k`` children scored parent + log p
    (`Growth` holds the state, the row's own scoring and the vocabulary's token ids)."""
    if growth.budget < 2:
        return DraftTree.root_only(growth.root)
    growth.take_root(growth.log_probs(growth.root_feature[None], None)[0])
    while (request := growth.request()) is not None:
        tokens, parents, positions = request
        inputs = layer.node_inputs(tokens, parents)
        keys, values, mask = growth.attention(*layer.node_keys_values(inputs, positions))
        out = layer.node_attend(inputs, positions, keys, values, mask)  # [F, H] predicted features
        growth.take(out, growth.log_probs(out, None))
    return growth.tree()


def grow_rows(layer: TreeLayer, growths: list[Growth], shared_cut: Callable[[torch.Tensor], torch.Tensor]
              ) -> list[DraftTree]:
    """`grow` for several rows of a batch in step: each level, every growing row's frontier through ``layer`` in
    one forward (N = the rows' F nodes; each node attends to its own row's cache and ancestors only: a
    block-diagonal mask over the rows' keys), and the shared vocabulary's logits of all of them in one product
    (``shared_cut``: features [N, H] -> [N, V']), each row then scoring its own part (its context columns).
    Gives each row the tree `grow` gives it (up to fp rounding)."""
    roots = torch.stack([g.root_feature for g in growths])  # [R, H]
    for growth, feature, cut in zip(growths, roots.split(1), shared_cut(roots).split(1)):
        growth.take_root(growth.log_probs(feature, cut)[0])
    while live := [(g, r) for g in growths if (r := g.request()) is not None]:
        tokens, parents, positions = (torch.cat([r[i] for _, r in live]) for i in range(3))
        inputs = layer.node_inputs(tokens, parents)
        new_keys, new_values = layer.node_keys_values(inputs, positions)  # [N, kv_heads, d]
        counts = [len(r[0]) for _, r in live]
        parts = [g.attention(k, v) for (g, _), k, v in zip(live, new_keys.split(counts), new_values.split(counts))]
        mask = torch.block_diag(*[m for _, _, m in parts])  # [N, sum of the rows' C + T]
        out = layer.node_attend(inputs, positions, torch.cat([k for k, _, _ in parts]),
                                torch.cat([v for _, v, _ in parts]), mask)  # [N, H]
        for (growth, _), part, cut in zip(live, out.split(counts), shared_cut(out).split(counts)):
            growth.take(part, growth.log_probs(part, cut))
    return [growth.tree() for growth in growths]


class DynamicTreeDrafter:
    """`propose` and `propose_rows` of a drafter growing EAGLE-2's tree over its own feature-level layer (eagle,
    eagle3; put it before the `Drafter` base class). The drafter gives the `TreeLayer` methods, ``extend_cache(ctx)``
    (its accepted cache extended with the newly accepted positions; the root's predicted feature [H]),
    ``cache.keys/values``, ``log_probs(features, cut)``, ``cut_logits(features)`` (the shared vocabulary's logits,
    one product for a batch's rows), ``vocab``, ``top_k`` and ``depth``."""

    def growth(self, ctx) -> Growth:
        """This step's tree, ready to grow: the cache extended first (every step, so it stays in step)."""
        self.follow_context(ctx)
        root_feature = self.extend_cache(ctx)  # [H]
        self._embed = ctx.target.embed_tokens
        return Growth(ctx.root, root_feature, self.cache.keys, self.cache.values, self.log_probs, self.vocab.token_ids,
                      ctx.budget, min(self.top_k, ctx.budget - 1, self.vocab.size), self.depth,
                      root_position=len(ctx.tokens) - 1)  # a depth-d candidate's pair sits at root + d - 1

    @torch.inference_mode()
    def propose(self, ctx) -> DraftTree:
        return grow(self, self.growth(ctx))

    @torch.inference_mode()
    def propose_rows(self, rows) -> list[DraftTree]:
        """Every row's cache extended on its own (accepted counts differ), then the rows' trees grown in step
        (`grow_rows`): each level's draft layer and vocabulary product once for all rows."""
        if len(rows) == 1 or rows[0][1].budget < 2:
            return super().propose_rows(rows)
        growths = [drafter.growth(ctx) for drafter, ctx in rows]
        self._embed = rows[0][1].target.embed_tokens  # the layer's weights are every row's
        return grow_rows(self, growths, self.cut_logits)
