"""medusa: K extra heads on the target's last hidden state, each guessing one token further ahead.

Head k (k = 1..K) is a residual block ``h + SiLU(W_k h + b_k)`` (W zero-initialised) followed by the
target's frozen ``lm_head`` (shared, not copied), and guesses the token k places after the root. A
proposal takes each head's top candidates and places them in a static tree of rank paths built from
the heads' measured top-k accuracies under the node budget (Medusa's cartesian placement: the rank-r
token of head d sits at every depth-d node of rank r, whatever its parent), or, by default for
specbench's own checkpoints, in EAGLE-2's dynamic tree scored by the heads' log-probabilities
(`HeadDrafter.draft_dynamic`).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import torch
from torch import nn

from specbench.drafter import DraftContext, TargetHandle
from specbench.drafters.checkpointed import CheckpointDrafter
from specbench.drafters.draft_vocab import RANKING_KEY
from specbench.drafters.dynamic_tree import Candidates
from specbench.drafters.layers import ResBlock
from specbench.drafters.published import published_method
from specbench.drafters.static_tree import DEFAULT_CHOICES, StaticTree, load_choices
from specbench.errors import DrafterOptionError, SpecbenchError
from specbench.tree import DraftTree


class MedusaHeads(nn.Module):
    """K heads; ``forward(h [..., H]) -> features [K, ..., H]`` (apply the target's lm_head for logits).

    ``own_vocab`` > 0 gives each head its own output projection ``lm_heads[k]`` [V, H] instead (the layout
    of the published Medusa-1 heads, see `published.py`); specbench's own training shares the target's.
    """

    def __init__(self, hidden: int, num_heads: int = 4, num_layers: int = 1, own_vocab: int = 0,
                 own_bias: bool = False) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers)]) for _ in range(num_heads))
        self.lm_heads = own_lm_heads(hidden, num_heads, own_vocab, own_bias)

    def forward(self, h: torch.Tensor, num_heads: int | None = None) -> torch.Tensor:
        """Features of the first ``num_heads`` heads (all by default): a shallow tree needs fewer."""
        return torch.stack([head(h) for head in self.heads[:num_heads]])

    def training_features(self, h: torch.Tensor, window_embeddings: torch.Tensor, heads: list[int] | None = None
                          ) -> torch.Tensor:
        """Features [K', B, H] of ``heads`` (default: all K) for hidden [B, H]; Medusa heads ignore the
        draft path's tokens."""
        return self(h) if heads is None else torch.stack([self.heads[k](h) for k in heads])


def own_lm_heads(hidden: int, num_heads: int, vocab: int, bias: bool) -> nn.ModuleList | None:
    """One output projection [V, H] per head (published Medusa-1 and Hydra heads), or None (vocab 0: the
    heads use the target's lm_head)."""
    return nn.ModuleList(nn.Linear(hidden, vocab, bias=bias) for _ in range(num_heads)) if vocab else None


def cut_own_heads(state: dict[str, torch.Tensor], recipe: dict, rows: int) -> tuple[dict[str, torch.Tensor], dict]:
    """A stored medusa/hydra checkpoint with own output projections kept to the ``rows`` most frequent tokens of
    its ranking: the heads then draft exactly what they drafted before wherever the best token is among those
    (a softmax over fewer rows keeps the order of the rest); a token beyond the cut can no longer be drafted.
    A projection's rows score the ranking's first V' tokens in ascending id order (`DraftVocab.of_projection`),
    so the kept rows are picked by token, not by position."""
    config = recipe.get("hyperparameters", {})
    have = config.get("own_vocab", 0)
    if not have:
        raise SpecbenchError("the checkpoint's heads have no output projections of their own to cut")
    if not 0 < rows <= have:
        raise SpecbenchError(f"--own-vocab must be between 1 and the heads' {have} rows, got {rows}")
    ranking = state[RANKING_KEY].long()  # [V], token ids, most frequent first
    row_tokens = ranking[:have].sort().values  # [V'], the token each stored row scores
    kept_rows = torch.searchsorted(row_tokens, ranking[:rows].sort().values)  # [rows], ascending ids again
    cut = {name: tensor[kept_rows] if name.startswith("lm_heads.") else tensor for name, tensor in state.items()}
    return cut, recipe | {"hyperparameters": config | {"own_vocab": rows}}


#: candidates per depth a head drafter's tree may use (the ``max_rank`` option's default)
DEFAULT_MAX_RANK = 8
#: a head drafter's tree: "static" rank paths (Medusa's and Hydra's own), or "dynamic" (EAGLE-2's, from the
#: heads' own log-probabilities at each step; `draft_dynamic`)
TREE_KINDS = ("static", "dynamic")


class HeadDrafter(CheckpointDrafter):
    """Shared plumbing of head drafters. ``tree="dynamic"`` (the default for specbench's own checkpoints)
    grows EAGLE-2's tree from the heads' log-probabilities at each step (``top_k`` children per expanded node
    and frontier width). ``tree="static"`` (the default with ``choices`` or published heads) is built from the
    checkpoint's measured accuracies, or taken from rank paths (the ``choices`` option; the published default
    tree for published heads)."""

    module_class: type[nn.Module]
    #: recipe hyper-parameters passed to ``module_class`` besides hidden size, heads and layers
    module_options: tuple[str, ...] = ("own_vocab", "own_bias")

    def __init__(self, checkpoint: str | None = None, max_rank: int = DEFAULT_MAX_RANK, draft_vocab: int | None = None,
                 choices: str | None = None, tree: str | None = None, top_k: int = DEFAULT_MAX_RANK,
                 context_vocab: bool | str = True) -> None:
        super().__init__(checkpoint, draft_vocab, context_vocab)
        if tree is not None and tree not in TREE_KINDS:
            raise DrafterOptionError(f"{self.method}.tree must be one of {', '.join(TREE_KINDS)}, got {tree!r}")
        if tree == "dynamic" and choices:
            raise DrafterOptionError(f"{self.method}: choices sets a static tree; it cannot go with tree=dynamic")
        if not isinstance(top_k, int) or top_k < 1:
            raise DrafterOptionError(f"{self.method}.top_k must be a positive integer, got {top_k!r}")
        self.max_rank = max_rank
        self.choices_spec = choices
        # the tree's rank paths when known before loading: the option (checked now, so a bad file fails
        # early), or the published default for a published checkpoint
        imported = bool(checkpoint) and published_method(Path(checkpoint)) is not None
        self.option_choices = load_choices(choices or DEFAULT_CHOICES) if choices or imported else []
        # the default tree: dynamic for specbench's own heads (it accepts more at every budget, docs/decisions.md),
        # static where rank paths are given or the heads are the authors' (their published tree)
        self.tree = tree or ("static" if self.option_choices else "dynamic")
        self.top_k = top_k
        self.choices: list[tuple[int, ...]] = []
        self.accuracy: list[list[float]] = []
        self._trees: dict[int, StaticTree] = {}

    def build_module(self, recipe: dict, target: TargetHandle) -> nn.Module:
        config = recipe["hyperparameters"]
        options = {name: config[name] for name in self.module_options if name in config}
        return self.module_class(target.config.hidden_size, config["num_heads"], config["num_layers"], **options)

    def loaded(self, recipe: dict) -> None:
        """Trees from the checkpoint's measured accuracies, or from rank paths: the ``choices`` option, and
        for imported heads (no accuracies) the published default tree."""
        self.accuracy = [row[: self.max_rank] for row in recipe.get("metrics", {}).get("heldout_topk_accuracy", [])]
        self.choices = self.option_choices or ([] if self.accuracy else load_choices(DEFAULT_CHOICES))
        if self.choices:
            deepest, heads = max(len(c) for c in self.choices), recipe["hyperparameters"]["num_heads"]
            if deepest > heads:
                raise SpecbenchError(f"{self.method}: the tree ({self.choices_spec or DEFAULT_CHOICES}) reaches depth "
                                     f"{deepest}, the checkpoint has {heads} heads")
        self._trees = {}

    def static_tree(self, budget: int) -> StaticTree:
        """The budget-node tree: the first budget - 1 rank paths of ``choices``, else the best by accuracy."""
        if budget not in self._trees:
            self._trees[budget] = StaticTree.from_paths(self.choices[: budget - 1]) if self.choices \
                else StaticTree.from_accuracies(self.accuracy, budget)
        return self._trees[budget]

    def identity(self) -> str:
        """The checkpoint's identity and the tree kind (a default that shapes proposals, docs/decisions.md)."""
        base = super().identity()
        tree = f"tree:dynamic:top_k:{self.top_k}" if self.tree == "dynamic" else "tree:static"
        return f"{base}:{tree}" if base else ""

    def max_budget(self) -> int | None:
        """With rank paths, the whole list plus the root: larger budgets give the same tree."""
        if self.tree == "dynamic":
            return None
        choices = self.choices or self.option_choices
        return len(choices) + 1 if choices else None

    @torch.inference_mode()
    def propose(self, ctx: DraftContext) -> DraftTree:
        self.follow_context(ctx)
        h = self.head_input(ctx)  # [H], every step (a drafter may keep per-position state)
        if self.tree == "dynamic":
            return self.draft_dynamic(ctx, h) if ctx.budget > 1 else DraftTree.root_only(ctx.root)
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

    def draft_dynamic(self, ctx: DraftContext, h: torch.Tensor) -> DraftTree:
        """EAGLE-2's tree over the heads (`grow_dynamic`), each depth's children from `children`."""
        k = min(self.top_k, ctx.budget - 1)
        steps = self.grow_dynamic(ctx, k)
        request = next(steps)
        while True:
            depth, paths = request
            try:
                request = steps.send(self.children(ctx, h, depth, paths, k))
            except StopIteration as done:
                return done.value

    def grow_dynamic(self, ctx: DraftContext, k: int) -> Generator[tuple[int, list[list[int]]], tuple, DraftTree]:
        """EAGLE-2's tree over the heads, as a generator: head d proposes ``k`` children for each of the ``k``
        best depth-(d - 1) candidates (by cumulative log-probability); the budget's best candidates form the
        tree (its return value). Each depth yields (depth, the frontier's paths below the root) and takes
        `children`' answer, so the rows of a batch can grow their trees in step (`propose_rows`)."""
        candidates = Candidates()
        frontier = [-1]  # candidate indices to expand; -1 is the root
        for depth in range(min(len(self.module.heads), ctx.budget - 1)):
            if not frontier:  # nothing left whose children could make the tree
                break
            paths = [[] if i < 0 else [candidates.tokens[a] for a in candidates.ancestors(i)] for i in frontier]
            log_probs, tokens = yield depth, paths  # [F, k'] each, k' <= k (a small vocabulary)
            above = torch.tensor([0.0 if i < 0 else candidates.scores[i] for i in frontier])  # [F]
            parents = [i for i in frontier for _ in range(tokens.shape[1])]
            added = candidates.add(tokens.flatten(), (above[:, None] + log_probs).flatten(), parents)
            frontier = candidates.worth_expanding(candidates.best(added, k), ctx.budget)
        return candidates.tree(ctx.root, ctx.budget)

    @torch.inference_mode()
    def propose_rows(self, rows):
        """Dynamic trees: every row's tree grown in step, depth by depth, each depth's children of all rows
        from one `children_rows` call (a subclass scores them in one forward); the trees are those `propose`
        grows. Static trees: row by row."""
        if len(rows) == 1 or self.tree != "dynamic" or rows[0][1].budget < 2:
            return super().propose_rows(rows)
        k = min(self.top_k, rows[0][1].budget - 1)
        for drafter, ctx in rows:
            drafter.follow_context(ctx)
        h = torch.stack([drafter.head_input(ctx) for drafter, ctx in rows])  # [R, H]
        steps = [drafter.grow_dynamic(ctx, k) for drafter, ctx in rows]
        requests = {r: next(step) for r, step in enumerate(steps)}  # row -> (depth, paths); depth 0 for all
        trees: list[DraftTree | None] = [None] * len(rows)
        while requests:
            live = sorted(requests)  # rows still growing, all at the same depth
            answers = self.children_rows([rows[r] for r in live], h[live], requests[live[0]][0],
                                         [requests[r][1] for r in live], k)
            for r, answer in zip(live, answers):
                try:
                    requests[r] = steps[r].send(answer)
                except StopIteration as done:
                    trees[r] = done.value
                    del requests[r]
        return trees

    def children(self, ctx: DraftContext, h: torch.Tensor, depth: int, paths: list[list[int]], k: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Head ``depth``'s k best (log-probabilities [F, k], token ids [F, k]) below each of F nodes, given
        each node's draft tokens below the root (``paths``, all of length ``depth``)."""
        raise NotImplementedError

    def children_rows(self, rows, h: torch.Tensor, depth: int, paths: list[list[list[int]]], k: int) -> list[tuple]:
        """`children` for several rows at one depth (h [R, H], ``paths`` per row): row by row unless a
        subclass scores them together; each answer must be the one `children` gives."""
        return [drafter.children(ctx, h[i], depth, paths[i], k) for i, (drafter, ctx) in enumerate(rows)]


class MedusaDrafter(HeadDrafter):
    """Medusa-style heads with a static tree; options: ``checkpoint`` (path stem, or a published Medusa
    checkpoint: its directory or ``medusa_lm_head.pt``), ``max_rank``, ``draft_vocab`` (score only the N most
    frequent tokens; 0: all; default: `DEFAULT_DRAFT_VOCAB` when the checkpoint stores a token ranking),
    ``context_vocab`` (default true: the cut also scores the tokens of the sequence so far),
    ``choices`` (the tree as rank paths: a shipped name such as mc_sim_7b_63 or a JSON file; default for
    published heads: mc_sim_7b_63, else the tree built from the checkpoint's measured accuracies), ``tree``
    ("dynamic": EAGLE-2's tree from the heads' confidence, the default for specbench's checkpoints; "static":
    the rank-path tree, the default with ``choices`` or published heads) and ``top_k`` (the dynamic tree's
    children per node and frontier width, default 8)."""

    method = "medusa"
    module_class = MedusaHeads
    capturable = True

    def compile_parts(self, compile):
        """The K heads in one forward (h [..., H] -> [K', ..., H]; K' and the rows are a few fixed values)."""
        self.module.forward = compile(self.module.forward)
        return ["heads"]

    def draft(self, ctx: DraftContext, shape: StaticTree, h: torch.Tensor) -> DraftTree:
        features = self.module(h, shape.max_depth)  # [D, H], D = tree depth <= K
        if self.head_vocabs is None:
            top = self.top_tokens(features, shape.max_rank)  # [D, R]
        else:  # an output projection per head
            top = torch.stack([self.top_tokens(f, shape.max_rank, head=d) for d, f in enumerate(features)])
        heads, ranks = shape.head_and_rank
        return shape.draft_tree(ctx.root, top.cpu()[heads, ranks])  # tokens [n - 1]

    def children(self, ctx: DraftContext, h: torch.Tensor, depth: int, paths: list[list[int]], k: int,
                 features: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Medusa's heads ignore the path: every node gets head ``depth``'s k best. With the shared
        ``lm_head`` all heads are scored at depth 0, in one pass over the draft ``lm_head``
        (as the static tree does), from the heads' outputs ``features`` [K, H] when `children_rows` computed
        them; heads with their own projections are scored when the tree reaches them (each is a pass over its
        own matrix, and a small budget needs only the first)."""
        if depth == 0 and self.head_vocabs is None:
            self._step_children = self.top_log_probs(self.module(h) if features is None else features, k)  # [K, k] x 2
        elif depth == 0:
            self._step_features = self.module(h, min(len(self.module.heads), ctx.budget - 1))  # [D, H]
        if self.head_vocabs is None:
            log_probs, tokens = self._step_children[0][depth], self._step_children[1][depth]  # [k] each
        else:  # an output projection per head
            log_probs, tokens = self.top_log_probs(self._step_features[depth], k, head=depth)  # [k] each
        return log_probs.expand(len(paths), -1), tokens.expand(len(paths), -1)

    def children_rows(self, rows, h: torch.Tensor, depth: int, paths: list[list[list[int]]], k: int) -> list[tuple]:
        """At depth 0 (shared ``lm_head``) the heads of every row in one forward: h [R, H] -> [K, R, H]."""
        if depth > 0 or self.head_vocabs is not None:
            return super().children_rows(rows, h, depth, paths, k)
        features = self.module(h)  # [K, R, H]
        return [drafter.children(ctx, h[i], depth, paths[i], k, features[:, i]) for i, (drafter, ctx) in enumerate(rows)]
