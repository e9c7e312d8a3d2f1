"""Statistical losslessness of the verification rules, checked against an exact distribution.

A *virtual target* over a 6-token vocabulary gives fixed random logits for every context, so the exact law
of the first three sampled tokens is a product of known distributions over 216 sequences. A small loop
(prefill root, propose, verify, emit) draws 10,000 sequences through each rule with drafters of every kind
(deterministic trees of likely or random tokens, with duplicates; trees sampled from q with and without
replacement; q equal to p) and a chi-square test (cells under 5 expected pooled, alpha 1e-4, fixed seeds)
compares the counts with the exact law. The same test at the same sample size catches planted bugs
(no residual update, the p/q rule on top-1 drafts) and shows typical acceptance is not lossless. The real
decode loop with real drafters is tested in tests/test_sampling_loop.py.
"""

from __future__ import annotations

import functools
import itertools
import random
import zlib
from collections import Counter

import pytest
import torch

from specbench.errors import SpecbenchError
from specbench.sampling import Sampling
from specbench.tree import DraftTree
from specbench.verify import RejectionRule, TypicalRule, make_rule
from stats import ALPHA, chi_square_fit

V = 6
K = 3             # tokens per sampled sequence
SAMPLES = 10_000
BUDGET = 7


def stable_seed(*key) -> int:
    """A seed fixed by ``key`` across processes and Python versions (``hash()`` of a string is salted
    per process, so it would give every pytest run a different virtual target)."""
    return zlib.crc32(repr(key).encode()) & 0x7FFF_FFFF


@functools.lru_cache(maxsize=None)
def target_logits(context: tuple[int, ...]) -> torch.Tensor:
    """Fixed random logits Tensor[V] for a context (the same on every call; never modify the result)."""
    generator = torch.Generator().manual_seed(stable_seed("target", context))
    return 1.5 * torch.randn(V, generator=generator)


@functools.lru_cache(maxsize=None)
def draft_logits(context: tuple[int, ...]) -> torch.Tensor:
    """A drafter's imperfect guess: the target's logits plus noise."""
    generator = torch.Generator().manual_seed(stable_seed("draft", context))
    return target_logits(context) + 1.0 * torch.randn(V, generator=generator)


def exact_law(sampling: Sampling) -> dict[tuple[int, ...], float]:
    """P(first K tokens) of sampling from the target alone."""
    law = {}
    for seq in itertools.product(range(V), repeat=K):
        prob = 1.0
        for i in range(K):
            prob *= float(sampling.warp(target_logits(seq[:i]))[seq[i]])
        if prob > 0:
            law[seq] = prob
    return law


# ---- drafters over the virtual target: (context, root, rng) -> DraftTree -------------------------------------
def random_shape(rng: random.Random) -> list[int]:
    n = rng.randint(1, BUDGET)
    return [-1] + [rng.randrange(i) for i in range(1, n)]


def likely_tokens_tree(context, root, rng):
    """Deterministic: a random shape whose children are the draft's most likely tokens in rank order
    (a repeated token now and then, as careless drafters produce)."""
    parents = random_shape(rng)
    tokens, paths = [root], {0: ()}
    for i, p in enumerate(parents[1:], start=1):
        rank = sum(1 for j in range(1, i) if parents[j] == p)
        order = draft_logits(context + paths[p]).argsort(descending=True).tolist()
        token = order[rank % 3] if rng.random() > 0.1 else order[0]
        tokens.append(token)
        paths[i] = paths[p] + (token,)
    return DraftTree(torch.tensor(tokens), torch.tensor(parents))


def random_tokens_tree(context, root, rng):
    """Deterministic: a random shape with uniformly random tokens."""
    parents = random_shape(rng)
    return DraftTree(torch.tensor([root] + [rng.randrange(V) for _ in parents[1:]]), torch.tensor(parents))


def sampled_tree(without_replacement: bool, exact_q: bool = False):
    """Sampled: every node's children are drawn from q (the draft's softmax, or p itself), recorded in probs."""

    def draft(context, root, rng):
        parents = random_shape(rng)
        generator = torch.Generator().manual_seed(rng.randrange(2**31))
        tokens, paths, probs, drawn = [root], {0: ()}, [], {}
        rows = {}
        for i, p in enumerate(parents[1:], start=1):
            if p not in rows:
                logits = target_logits(context + paths[p]) if exact_q else draft_logits(context + paths[p])
                rows[p] = logits.softmax(-1)
            q = rows[p].clone()
            if without_replacement:
                q[drawn.get(p, [])] = 0.0
                if q.sum() == 0:  # every token already drawn: stop branching here
                    parents = parents[:i]
                    break
            token = int(torch.multinomial(q, 1, generator=generator))
            drawn.setdefault(p, []).append(token)
            tokens.append(token)
            paths[i] = paths[p] + (token,)
        probs = torch.stack([rows.get(i, torch.full((V,), 1.0 / V)) for i in range(len(tokens))])
        return DraftTree(torch.tensor(tokens), torch.tensor(parents[: len(tokens)]), probs=probs,
                         draws="without_replacement" if without_replacement else "independent")

    return draft


def top1_declared_sampled(context, root, rng):
    """A drafter bug the p/q rule cannot survive: top-1 chains declared as sampled from q."""
    tokens, probs, path = [root], [], ()
    for _ in range(3):
        q = draft_logits(context + path).softmax(-1)
        probs.append(q)
        token = int(q.argmax())
        tokens.append(token)
        path += (token,)
    probs.append(torch.full((V,), 1.0 / V))
    return DraftTree(torch.tensor(tokens), torch.arange(-1, len(tokens) - 1), probs=torch.stack(probs))


DRAFTERS = {
    "likely-tokens": likely_tokens_tree,
    "random-tokens": random_tokens_tree,
    "sampled-independent": sampled_tree(without_replacement=False),
    "sampled-without-replacement": sampled_tree(without_replacement=True),
    "sampled-q-equals-p": sampled_tree(without_replacement=False, exact_q=True),
}


def sample_sequences(rule, drafter, seed: int, samples: int = SAMPLES) -> tuple[Counter, float]:
    """(counts of the first K tokens, mean accepted drafts per step) over ``samples`` runs of the mini loop."""
    rng = random.Random(seed)
    counts: Counter = Counter()
    accepted, steps = 0, 0
    for _ in range(samples):
        out = [rule.first_token(target_logits(()))]
        while len(out) < K:
            context = tuple(out)
            tree = drafter(context, out[-1], rng)
            tree.validate(out[-1], BUDGET)
            paths = [tuple(int(tree.tokens[j]) for j in tree.path_to(i)[1:]) for i in range(len(tree))]
            logits = torch.stack([target_logits(context + path) for path in paths])  # [n, V]
            outcome = rule.verify(tree, logits, torch.zeros(len(tree), 1))
            out += outcome.tokens[1:] + [outcome.bonus]
            accepted += outcome.accepted
            steps += 1
        counts[tuple(out[:K])] += 1
    return counts, accepted / max(steps, 1)


SETTINGS = [Sampling(temperature=1.0), Sampling(temperature=1.2, top_k=5, top_p=0.95)]


CASES = [(name, SETTINGS[0]) for name in DRAFTERS] + [
    ("likely-tokens", SETTINGS[1]), ("sampled-without-replacement", SETTINGS[1])]


@pytest.mark.parametrize("name,sampling", CASES, ids=[f"{n}-{s.label()}".replace(" ", "-") for n, s in CASES])
def test_rejection_sampling_is_lossless(name, sampling):
    rule = make_rule(sampling, seed=11)
    counts, mean_accepted = sample_sequences(rule, DRAFTERS[name], seed=5)
    fit = chi_square_fit(counts, exact_law(sampling))
    print(f"{name} {sampling.label()}: {fit} accepted/step={mean_accepted:.2f}")
    assert fit.p_value > ALPHA, fit
    assert mean_accepted > (0.05 if name == "random-tokens" else 0.3)  # the drafts were really tried


class NoResidualRule(RejectionRule):
    """Planted bug: a rejected draft's mass is not removed (the bonus comes from p, not the residual)."""

    @staticmethod
    def reject_deterministic(residual, x):
        pass

    @staticmethod
    def reject_sampled(residual, q):
        pass


def planted(rule_class, sampling=SETTINGS[0]):
    generator = torch.Generator().manual_seed(11)
    return rule_class(sampling, generator)


@pytest.mark.parametrize("name", ["likely-tokens", "sampled-independent"])
def test_skipping_the_residual_is_caught(name):
    counts, _ = sample_sequences(planted(NoResidualRule), DRAFTERS[name], seed=5)
    fit = chi_square_fit(counts, exact_law(SETTINGS[0]))
    print(f"planted no-residual, {name}: {fit}")
    assert fit.p_value < ALPHA, fit


def test_p_over_q_on_deterministic_drafts_is_caught():
    """The p/q rule is only valid for drafts really drawn from q: top-1 drafts declared as sampled fail."""
    counts, _ = sample_sequences(make_rule(SETTINGS[0], seed=11), top1_declared_sampled, seed=5)
    fit = chi_square_fit(counts, exact_law(SETTINGS[0]))
    print(f"top-1 drafts under p/q: {fit}")
    assert fit.p_value < ALPHA, fit


def test_typical_acceptance_is_lossy():
    """Typical acceptance keeps likely drafts whatever their probability: the law moves far from p."""
    sampling = Sampling(temperature=1.0, verify="typical")
    counts, mean_accepted = sample_sequences(planted(TypicalRule, sampling), likely_tokens_tree, seed=5)
    fit = chi_square_fit(counts, exact_law(sampling))
    print(f"typical: {fit} accepted/step={mean_accepted:.2f}")
    assert fit.p_value < ALPHA and fit.tv > 0.05, fit


def test_typical_accepts_by_threshold_and_breaks_ties_by_likelihood():
    sampling = Sampling(temperature=1.0, verify="typical", typical_epsilon=0.2, typical_delta=10.0)
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.1, 0.1], [0.25] * 4, [0.25] * 4, [0.25] * 4]))
    # root children: token 0 (p .5), token 1 (p .3), token 2 (p .1 < .2); each one level deep
    tree = DraftTree(torch.tensor([3, 1, 0, 2]), torch.tensor([-1, 0, 0, 0]))
    outcome = planted(TypicalRule, sampling).verify(tree, logits, torch.zeros(4, 1))
    assert outcome.path == [0, 2]  # tokens 0 and 1 both pass; token 0 is more likely
    tree = DraftTree(torch.tensor([3, 2]), torch.tensor([-1, 0]))
    assert planted(TypicalRule, sampling).verify(tree, logits[:2], torch.zeros(2, 1)).path == [0]


def test_deterministic_rule_accepts_the_last_remaining_token_surely():
    """When siblings cover p's whole support, the last one standing is accepted with probability 1."""
    sampling = Sampling(temperature=1.0, top_k=2)
    logits = torch.tensor([[2.0, 1.0, -1.0, -3.0], [0.0] * 4, [0.0] * 4])
    tree = DraftTree(torch.tensor([3, 0, 1]), torch.tensor([-1, 0, 0]))
    for seed in range(200):
        outcome = make_rule(sampling, seed=seed).verify(tree, logits, torch.zeros(3, 1))
        assert outcome.accepted == 1


def test_sampled_draft_outside_q_is_an_error():
    tree = DraftTree(torch.tensor([0, 1]), torch.tensor([-1, 0]), probs=torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    with pytest.raises(SpecbenchError, match="draft probability 0"):
        make_rule(SETTINGS[0], seed=0).verify(tree, torch.zeros(2, 2), torch.zeros(2, 1))


def test_rules_are_reproducible_from_their_seed():
    def draws(seed):
        counts, _ = sample_sequences(make_rule(SETTINGS[0], seed=seed), likely_tokens_tree, seed=1, samples=50)
        return counts

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)
