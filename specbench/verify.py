"""Verification of a draft tree: the one place acceptance is decided, greedy or sampled.

Terminology (used everywhere in specbench):

- **proposed**: the non-root nodes of the draft tree a drafter returns for one step.
- **p** (target distribution): the target's sampling distribution at a node, ``Sampling.warp(logits)``;
  at temperature 0 a point mass on the argmax.
- **q** (draft distribution): the distribution a drafter *sampled* a node's children from,
  ``DraftTree.probs[node]``. Drafters that choose tokens deterministically (top-k of heads or slots,
  static trees, n-gram matches; every built-in drafter) leave ``probs`` None: their drafts are
  **deterministic drafts**, verified as if q were a point mass on each proposed token.
- **accepted**: proposed nodes on the root-to-node path the rule accepts. The root is always on the path
  (it is the target's own choice).
- **residual**: under rejection sampling, the distribution left at a node after rejecting some of its
  children: p with the rejected mass removed, renormalised.
- **bonus**: one token the target gives for free each step at the last accepted node: its argmax when
  greedy, a sample from the node's residual (p itself when no child was tried) when sampling.
- **emitted**: what a step appends to the output: the accepted tokens, then the bonus (cut at EOS or at
  ``max_new_tokens``). A step's *accepted length* is the number of tokens it emitted, so vanilla
  decoding has accepted length 1 and tau (mean accepted length) 1.0.

Rules (`make_rule` picks one from `specbench.sampling.Sampling`):

- **greedy** (temperature 0): accept the longest path whose every token equals the target's argmax at its
  parent. Every emitted token is the target's argmax given exactly the tokens before it, so the output
  ids equal plain greedy decoding token for token (the lossless tests check it in fp32).
- **rejection** (temperature > 0, lossless): from the root, try the node's children in index order
  (drafters put their most likely candidate first). A deterministic draft x is accepted with probability
  r(x), where r is the current residual (p at first); on rejection r(x) is set to 0 and r renormalised.
  A sampled draft x is accepted with probability min(1, r(x) / q(x)); on rejection r becomes
  norm(max(0, r - q)). With ``DraftTree.draws == "without_replacement"`` q is the draft distribution
  with the earlier siblings' tokens removed and renormalised (the conditional law of that draw). Accepting
  a child moves there and restarts with its p; when every child is rejected (or there are none) the bonus
  is drawn from r. This is SpecInfer's multi-draft recursive rejection sampling; each emitted token is
  distributed exactly as p given the tokens before it, whatever the drafter proposes, so the output
  distribution equals sampling from the target alone (tests/test_sampling_rules.py and
  tests/test_sampling_loop.py check it statistically).
  The p/q rule is valid only for tokens really drawn from q; that is why deterministic drafts get their
  own rule.
- **typical** (temperature > 0, **lossy**; Medusa's typical acceptance): a child x of a node is accepted
  when its parent is and p(x) > min(epsilon, delta * exp(-H(p))) at the parent (H with log(p + 1e-5), as
  Medusa). The deepest accepted node wins, ties broken by the larger sum of log p along the path; the
  bonus is sampled from p at that node (Medusa's ``fast`` mode takes the argmax instead; sampling keeps a
  step that accepts nothing exact). The output distribution is *not* the target's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from specbench.errors import SpecbenchError
from specbench.sampling import Sampling
from specbench.tree import DraftTree


@dataclass
class VerifyOutcome:
    """The result of verifying one draft tree.

    path:   node indices of the accepted path, root first (``path[0] == 0``)
    bonus:  the target's token at ``path[-1]`` (argmax when greedy, sampled from the residual otherwise)
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


def greedy_select(tokens: torch.Tensor, parents: torch.Tensor, ancestors: torch.Tensor, valid: torch.Tensor,
                  target_argmax: torch.Tensor) -> torch.Tensor:
    """`greedy_path`'s rule in tensor ops, for a tree padded to a bucket (`specbench.static_cache`), on the
    device and inside the compiled verify graph: no per-node walk, one readback per step.

    The same rule: a node is accepted when every node on its root path (itself included, the root
    excepted) is ``valid`` (padding never is) and carries the target's argmax at its parent; the deepest
    accepted node wins, the lowest index on ties. tests/test_compiled.py checks it equals `greedy_path`.

    tokens, parents, target_argmax: LongTensor[B]; ancestors: BoolTensor[B, B] (ancestor-or-self);
    valid: BoolTensor[B]. returns LongTensor[2]: the chosen node, and the target's argmax there (the bonus).
    """
    size = tokens.shape[0]
    index = torch.arange(size, device=tokens.device)
    ok = valid & (tokens == target_argmax[parents.clamp(min=0)])
    ok = ok | (index == 0)  # the root is the target's own choice
    accepted = ~(ancestors & ~ok[None, :]).any(dim=-1)  # [B]
    depth = ancestors.sum(dim=-1)  # [B], root 1
    score = torch.where(accepted, depth * (size + 1) + (size - index), torch.zeros_like(depth))
    best = score.argmax().unsqueeze(0)  # [1]: indexing with a 0-d tensor would read it back (a graph break)
    return torch.cat([best, target_argmax[best]])


def verify_step(rule: "AcceptanceRule", tree: DraftTree, logits: torch.Tensor, hidden: torch.Tensor,
                selection: torch.Tensor | None = None) -> VerifyOutcome:
    """One step's outcome by ``rule``. With ``selection`` (the compiled regime's `greedy_select` of this
    step, still on the device) a greedy rule reads it back (the step's one readback) instead of walking
    the tree; every other case is ``rule.verify``."""
    if selection is None or not isinstance(rule, GreedyRule):
        return rule.verify(tree, logits, hidden)
    best, bonus = selection.tolist()
    if best >= len(tree):
        raise SpecbenchError(f"the device's greedy choice is node {best} of a {len(tree)}-node tree: a padding node "
                             "was accepted")
    return _outcome(tree, tree.path_to(best), bonus, hidden)


def verify_greedy(tree: DraftTree, logits: torch.Tensor, hidden: torch.Tensor) -> VerifyOutcome:
    """Accept the longest path that greedy decoding would have produced.

    logits: Tensor[n, V]  target logits at each tree node
    hidden: Tensor[n, H]  target hidden states at each tree node
    """
    target_argmax = logits.argmax(dim=-1).tolist()  # [n]
    path = greedy_path(tree, target_argmax)
    return _outcome(tree, path, target_argmax[path[-1]], hidden)


def _outcome(tree: DraftTree, path: list[int], bonus: int, hidden: torch.Tensor) -> VerifyOutcome:
    index = torch.tensor(path, dtype=torch.long, device=hidden.device)
    tokens = tree.tokens.tolist()
    return VerifyOutcome(path=path, bonus=bonus, hidden=hidden.index_select(0, index), tokens=[tokens[i] for i in path])


class AcceptanceRule(Protocol):
    """What the decode loop asks of a rule: the first token after prefill, and one step's outcome."""

    name: str

    def first_token(self, logits: torch.Tensor) -> int:
        """The token after the prompt from the prefill's last logits Tensor[V]."""
        ...

    def verify(self, tree: DraftTree, logits: torch.Tensor, hidden: torch.Tensor) -> VerifyOutcome:
        """logits: Tensor[n, V], hidden: Tensor[n, H] at every tree node."""
        ...


class GreedyRule:
    """Temperature 0: argmax root, `verify_greedy` steps. Uses no randomness."""

    name = "greedy"

    def first_token(self, logits: torch.Tensor) -> int:
        return int(logits.argmax())

    def verify(self, tree: DraftTree, logits: torch.Tensor, hidden: torch.Tensor) -> VerifyOutcome:
        return verify_greedy(tree, logits, hidden)


class _SamplingRule:
    """Shared by the sampling rules: p from logits, uniform draws and categorical draws from one generator."""

    name = ""

    def __init__(self, sampling: Sampling, generator: torch.Generator) -> None:
        self.sampling = sampling
        self.generator = generator  # a CPU generator: draws are the same on every device

    def target_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """p as float64 on the CPU: Tensor[..., V] from logits Tensor[..., V]."""
        return self.sampling.warp(logits).to("cpu", torch.float64)

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.generator, dtype=torch.float64))

    def draw(self, distribution: torch.Tensor) -> int:
        """One token from a (not necessarily normalised) non-negative Tensor[V], by inverting its CDF with
        one uniform (faster than ``torch.multinomial`` for one draw)."""
        cdf = distribution.cumsum(0)  # [V]
        token = int(torch.searchsorted(cdf, self.uniform() * cdf[-1], right=True))
        if token >= len(cdf):  # u * total rounded up to total: the last token with mass
            token = int(distribution.nonzero()[-1])
        return token

    def first_token(self, logits: torch.Tensor) -> int:
        return self.draw(self.target_probs(logits))


class RejectionRule(_SamplingRule):
    """Lossless multi-draft rejection sampling over the tree (see the module docstring)."""

    name = "rejection"

    def verify(self, tree: DraftTree, logits: torch.Tensor, hidden: torch.Tensor) -> VerifyOutcome:
        tokens = tree.tokens.tolist()
        children = tree.children()
        path = [0]
        while True:
            node = path[-1]
            residual = self.target_probs(logits[node])  # [V], starts as p
            child = self.try_children(tree, node, children[node], tokens, residual)
            if child is None:
                return _outcome(tree, path, self.draw(residual), hidden)
            path.append(child)

    def try_children(self, tree: DraftTree, node: int, kids: list[int], tokens: list[int],
                     residual: torch.Tensor) -> int | None:
        """The accepted child of ``node``, or None. ``residual`` (Tensor[V], kept unnormalised so that a
        last remaining token is accepted with probability exactly 1) is updated in place."""
        q = None
        if tree.probs is not None and kids:
            q = tree.probs[node].to("cpu", torch.float64)  # [V]
            q = q / q.sum()
        for child in kids:
            x = tokens[child]
            total = float(residual.sum())
            if q is None:  # deterministic draft: q is a point mass on x; accept with probability r(x)
                if self.uniform() * total < residual[x]:
                    return child
                self.reject_deterministic(residual, x)
            else:
                if q[x] <= 0:
                    raise SpecbenchError(f"draft tree node {child} proposes token {x} with draft probability 0 "
                                         f"at node {node}: a sampled draft must come from DraftTree.probs")
                if self.uniform() * q[x] * total < residual[x]:  # u < min(1, r(x) / q(x)), r normalised
                    return child
                self.reject_sampled(residual, q)
                if tree.draws == "without_replacement":
                    q[x] = 0.0
                    q /= q.sum()
        return None

    @staticmethod
    def reject_deterministic(residual: torch.Tensor, x: int) -> None:
        """r <- r with x removed (renormalised when drawn from)."""
        residual[x] = 0.0

    @staticmethod
    def reject_sampled(residual: torch.Tensor, q: torch.Tensor) -> None:
        """r <- max(0, norm(r) - q). (If rounding left nothing, r was q up to rounding, the draft was
        accepted with probability 1 - O(1e-16), and r is left as it was.)"""
        updated = (residual / residual.sum() - q).clamp_(min=0.0)
        if updated.sum() > 0:
            residual.copy_(updated)


class TypicalRule(_SamplingRule):
    """Medusa's typical acceptance (lossy; see the module docstring)."""

    name = "typical"

    def verify(self, tree: DraftTree, logits: torch.Tensor, hidden: torch.Tensor) -> VerifyOutcome:
        probs = self.target_probs(logits)  # [n, V]
        entropy = -(probs * torch.log(probs + 1e-5)).sum(dim=-1)  # [n]
        threshold = torch.clamp(self.sampling.typical_delta * torch.exp(-entropy),
                                max=self.sampling.typical_epsilon).tolist()  # [n]
        tokens, parents = tree.tokens.tolist(), tree.parents_list
        score: dict[int, tuple[int, float]] = {0: (0, 0.0)}  # accepted node -> (depth, sum of log p)
        best = 0
        for i in range(1, len(tokens)):
            parent = parents[i]
            if parent not in score:
                continue
            prob = float(probs[parent, tokens[i]])
            if prob > threshold[parent]:
                depth, loglik = score[parent]
                score[i] = (depth + 1, loglik + math.log(prob))
                if score[i] > score[best]:
                    best = i
        return _outcome(tree, tree.path_to(best), self.draw(probs[best]), hidden)


def make_rule(sampling: Sampling, seed: int | None = None) -> AcceptanceRule:
    """The rule a run's settings ask for, with its own random stream (``seed``: the turn's seed)."""
    if sampling.rule == "greedy":
        return GreedyRule()
    generator = torch.Generator(device="cpu")
    generator.manual_seed(0 if seed is None else seed)
    return (RejectionRule if sampling.rule == "rejection" else TypicalRule)(sampling, generator)
