"""Statistical losslessness of the real decode loop (`generate`) at temperature > 0, on a tiny random Qwen2.

For every registered drafter (trained ones get a tiny checkpoint for this target) and for oracle drafters
(the target's own argmax chain; children sampled from the target's p itself, declared in ``probs``; an
adversary proposing unlikely and repeated tokens), the first three generated tokens of 1,000 sampled
sequences are compared with their exact law under sampling from the target alone (T = 0.5, top-k 5:
at most 125 sequences, every probability from plain transformers forwards). Chi-square, cells under 5
expected pooled, alpha 1e-4, fixed seeds. The same test catches a planted bug in the loop (the residual
update skipped) and shows typical acceptance moving the law. Greedy equality is tested elsewhere
(tests/test_lossless.py) and stays unchanged.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from conftest import PROMPTS, build_tiny_model, make_target
from stats import ALPHA, chi_square_fit
from specbench import DraftContext, Drafter, DraftTree
from specbench.harness.loop import generate
from specbench.registry import available_drafters
from specbench.sampling import Sampling
from specbench.verify import RejectionRule

pytestmark = pytest.mark.usefixtures("single_thread")

SAMPLING = Sampling(temperature=0.5, top_k=5)
PROMPT = PROMPTS[1]  # repeats itself, so n-gram lookup proposes from the first step
K = 3
SAMPLES = 1000
BUDGET = 6


@pytest.fixture(scope="module")
def target():
    return make_target(build_tiny_model("qwen2"))


@torch.inference_mode()
def target_p(target, context: list[int]) -> torch.Tensor:
    """The target's sampling distribution after ``context`` (plain transformers forward, no cache)."""
    logits = target.model(input_ids=torch.tensor([context])).logits[0, -1]
    return SAMPLING.warp(logits)


@pytest.fixture(scope="module")
def exact(target) -> dict[tuple[int, ...], float]:
    """P(first K tokens) under sampling from the target alone."""
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(K):
        grown = {}
        for seq, prob in law.items():
            if seq and seq[-1] in target.eos_ids:  # generation stops at EOS
                grown[seq] = prob
                continue
            p = target_p(target, PROMPT + list(seq))
            for token in p.nonzero().flatten().tolist():
                grown[seq + (token,)] = prob * float(p[token])
        law = grown
    return law


class ArgmaxChain(Drafter):
    """The target's own greedy continuation as a chain: the most likely drafts there are."""

    def __init__(self, target) -> None:
        super().__init__()
        self.target = target

    def propose(self, ctx: DraftContext) -> DraftTree:
        context, drafts = ctx.tokens.tolist(), []
        for _ in range(min(ctx.budget - 1, K - 1)):  # deeper drafts cannot change the first K tokens
            token = int(target_p(self.target, context + drafts).argmax())
            drafts.append(token)
        return DraftTree.chain(ctx.root, drafts)


class SampledFromTarget(Drafter):
    """Two children per node drawn without replacement from the target's p itself (declared in probs),
    one level below the first child: q close to p, so most drafts are accepted."""

    def __init__(self, target) -> None:
        super().__init__()
        self.target = target
        self.generator = torch.Generator().manual_seed(0)

    def propose(self, ctx: DraftContext) -> DraftTree:
        context = ctx.tokens.tolist()
        q_root = target_p(self.target, context)
        first = torch.multinomial(q_root, 2, replacement=False, generator=self.generator).tolist()
        q_first = target_p(self.target, context + first[:1])
        grand = int(torch.multinomial(q_first, 1, generator=self.generator))
        tokens = [ctx.root, *first, grand]
        uniform = torch.full_like(q_root, 1.0 / len(q_root))
        probs = torch.stack([q_root, q_first, uniform, uniform])
        return DraftTree(torch.tensor(tokens), torch.tensor([-1, 0, 0, 1]), probs=probs, draws="without_replacement")


class Adversary(Drafter):
    """Deterministic drafts that are mostly wrong: the least likely token, the same token twice, the root."""

    def __init__(self, target) -> None:
        super().__init__()
        self.target = target

    def propose(self, ctx: DraftContext) -> DraftTree:
        p = target_p(self.target, ctx.tokens.tolist())
        likely, unlikely = int(p.argmax()), int(p.argmin())
        return DraftTree(torch.tensor([ctx.root, unlikely, likely, likely, ctx.root]), torch.tensor([-1, 0, 0, 0, 2]))


ORACLES = {"argmax-chain": ArgmaxChain, "sampled-from-target": SampledFromTarget, "adversary": Adversary}


def sample_first_tokens(target, drafter, sampling: Sampling = SAMPLING) -> tuple[Counter, float]:
    """(counts of the first K tokens, tau) over SAMPLES sequences, seeds 0..SAMPLES-1."""
    counts: Counter = Counter()
    lengths: list[int] = []
    for seed in range(SAMPLES):
        result = generate(target, drafter, PROMPT, K, BUDGET, sampling=sampling, seed=seed)
        counts[tuple(result.output_ids)] += 1
        lengths += result.accept_lengths
    return counts, sum(lengths) / max(len(lengths), 1)


def make_drafter(name: str, target, drafter_for):
    return ORACLES[name](target) if name in ORACLES else drafter_for(name, target)


@pytest.mark.parametrize("name", [*sorted(available_drafters()), *ORACLES])
def test_generate_samples_from_the_target(name, target, exact, drafter_for):
    counts, tau = sample_first_tokens(target, make_drafter(name, target, drafter_for))
    fit = chi_square_fit(counts, exact)
    print(f"{name}: {fit} tau={tau:.2f}")
    assert fit.p_value > ALPHA, fit
    if name in ("argmax-chain", "sampled-from-target"):
        assert tau > 1.3  # drafts really were accepted, so the accepted branch of the rule was exercised


def test_a_planted_residual_bug_is_caught(target, exact, monkeypatch):
    monkeypatch.setattr(RejectionRule, "reject_deterministic", staticmethod(lambda residual, x: None))
    counts, _ = sample_first_tokens(target, ArgmaxChain(target))
    fit = chi_square_fit(counts, exact)
    print(f"planted no-residual: {fit}")
    assert fit.p_value < ALPHA, fit


def test_typical_acceptance_moves_the_distribution(target, exact):
    sampling = Sampling(temperature=0.5, top_k=5, verify="typical")
    counts, tau = sample_first_tokens(target, ArgmaxChain(target), sampling)
    fit = chi_square_fit(counts, exact)
    print(f"typical: {fit} tau={tau:.2f}")
    assert fit.p_value < ALPHA, fit


def test_a_sampled_turn_is_reproduced_from_its_seed(target):
    drafter = ArgmaxChain(target)
    first = generate(target, drafter, PROMPT, 12, BUDGET, sampling=SAMPLING, seed=7)
    again = generate(target, drafter, PROMPT, 12, BUDGET, sampling=SAMPLING, seed=7)
    other = [generate(target, drafter, PROMPT, 12, BUDGET, sampling=SAMPLING, seed=s).output_ids for s in range(8, 12)]
    assert first.output_ids == again.output_ids and first.accept_lengths == again.accept_lengths
    assert any(ids != first.output_ids for ids in other)
