"""Statistical losslessness of the real decode loop (`generate`) at temperature > 0, on a tiny random Qwen2.

For every registered drafter (trained ones get a tiny checkpoint for this target) and for oracle drafters
(the target's own argmax chain; children sampled from the target's p itself, declared in ``probs``; an
adversary proposing unlikely and repeated tokens), the first three generated tokens of 1,000 sampled
sequences are compared with their exact law under sampling from the target alone (T = 0.5, top-k 5:
at most 125 sequences, every probability from plain transformers forwards). Chi-square, cells under 5
expected pooled, alpha 1e-4, fixed seeds. The same test catches a planted bug in the loop (the residual
update skipped) and shows typical acceptance moving the law. Greedy equality is tested elsewhere
(tests/test_lossless.py) and stays unchanged.

Three tokens are one or two steps. The long-run tests sample 40 tokens per sequence (9-35 steps, each
with a KV commit, hundreds with rejected drafts) and check every emitted token against the target's
conditional law given the tokens actually emitted before it: the randomised probability integral
transform of token t under p(. | prompt, tokens before t) (tokens ordered by p) is uniform on [0, 1] and
independent across t exactly when every token is drawn from that law (one plain transformers forward per
sequence gives every p). A chi-square test of uniformity, over all positions and over early, middle and
late positions separately, and a check that no token outside the target's support (its top-k) is
emitted, catch a planted wrong KV commit that the three-token test cannot see. CI cost of the long-run
tests: 63-81 s of CPU time on one thread of a 2-core Xeon (two measurements with process time; eagle
24-30 s of it).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from conftest import PROMPTS, build_tiny_model, make_target
from specbench import DraftContext, Drafter, DraftTree, kv
from specbench.harness.loop import generate
from specbench.registry import available_drafters
from specbench.sampling import Sampling
from specbench.verify import RejectionRule
from stats import ALPHA, chi_square_fit, randomized_pit, uniform_fit

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


# ---- long runs: every position against the target's conditional law ----------------------------------------

LONG = 40           # tokens per sequence
LONG_SAMPLES = 150  # 6,000 transformed tokens per drafter
WINDOWS = {"early": range(0, 8), "middle": range(8, 24), "late": range(24, LONG)}
#: Drafters whose drafts are both accepted and rejected in sampled text, deterministic and sampled (sps);
#: n-gram lookup rarely matches sampled text, and the target's own p as q rejects nothing.
LONG_DRAFTERS = ["hydra", "eagle", "sps", "adversary"]


@torch.inference_mode()
def transformed(target, output: list[int], generator: torch.Generator) -> list[float | None]:
    """`randomized_pit` of each token of ``output`` (generated after PROMPT) under the target's p given
    PROMPT and the output before it (one plain transformers forward)."""
    ids = torch.tensor([PROMPT + output])
    logits = target.model(input_ids=ids).logits[0, len(PROMPT) - 1 : len(PROMPT) - 1 + len(output)]  # [T, V]
    return randomized_pit(SAMPLING.warp(logits), torch.tensor(output), generator)


def long_run(target, drafter) -> tuple[dict[str, list[float]], dict[str, int]]:
    """(transformed values by window of positions, counts of tokens outside the target's support / steps /
    steps with a rejected draft / accepted drafts) over LONG_SAMPLES sequences of LONG tokens, seeds 1000.."""
    generator = torch.Generator().manual_seed(0)
    values: dict[str, list[float]] = {w: [] for w in WINDOWS}
    counts = {"sequences": 0, "impossible_tokens": 0, "steps": 0, "rejecting_steps": 0, "accepted_drafts": 0}
    for seed in range(1000, 1000 + LONG_SAMPLES):
        result = generate(target, drafter, PROMPT, LONG, BUDGET, sampling=SAMPLING, seed=seed)
        u = transformed(target, result.output_ids, generator)
        for window, positions in WINDOWS.items():
            values[window] += [u[t] for t in positions if t < len(u) and u[t] is not None]
        counts["sequences"] += 1
        counts["impossible_tokens"] += u.count(None)
        counts["steps"] += len(result.steps)
        for step in result.steps[:-1]:  # the last step may be cut at LONG
            counts["accepted_drafts"] += step.accepted - 1
            # emitted = accepted path + bonus; a path shorter than the tree's depth rejected some branch
            counts["rejecting_steps"] += step.nodes > 1 and step.accepted - 1 < step.depth
    return values, counts


def long_failures(values: dict[str, list[float]], counts: dict[str, int]) -> list[str]:
    """What a long run gets wrong: tokens outside the target's support, and each window of positions
    (and all of them) whose transformed values fail the uniformity test at ALPHA."""
    fits = {window: uniform_fit(v) for window, v in values.items()}
    fits["all"] = uniform_fit([u for v in values.values() for u in v])
    print(f"{counts} " + " ".join(f"{w}: {fit}" for w, fit in fits.items()))
    failures = [f"{counts['impossible_tokens']} tokens outside the target's support"] if counts["impossible_tokens"] else []
    return failures + [f"{window}: {fit}" for window, fit in fits.items() if fit.p_value <= ALPHA]


@pytest.mark.parametrize("name", LONG_DRAFTERS)
def test_long_runs_sample_every_position_from_the_target(name, target, drafter_for):
    """40 tokens, 150 sequences: every position's token follows the target's law given the tokens before
    it, early, middle and late, after 9-35 steps per sequence, with hundreds of rejections in all."""
    values, counts = long_run(target, make_drafter(name, target, drafter_for))
    assert long_failures(values, counts) == []
    assert len(values["late"]) == LONG_SAMPLES * len(WINDOWS["late"])  # every sequence ran to the end
    assert counts["steps"] >= 5 * LONG_SAMPLES  # KV commits
    assert counts["rejecting_steps"] >= LONG_SAMPLES and counts["accepted_drafts"] >= LONG_SAMPLES


def test_a_planted_kv_commit_bug_is_caught_late_but_not_in_the_first_tokens(target, monkeypatch):
    """Planted bug: the commit keeps the first tree slots in node order instead of the accepted path's
    (right whenever a first child is accepted, wrong after a later sibling): the tokens after that step are
    drawn given a wrong context. The first three tokens come before any wrong commit is read, so they
    are exactly those of the correct loop and the three-token test cannot see the bug; the long test does."""
    drafter = Adversary(target)
    first = [generate(target, drafter, PROMPT, K, BUDGET, sampling=SAMPLING, seed=s).output_ids for s in range(50)]
    commit = kv.commit_path
    monkeypatch.setattr(kv, "commit_path", lambda cache, past, path, n: commit(cache, past, list(range(len(path))), n))
    assert [generate(target, drafter, PROMPT, K, BUDGET, sampling=SAMPLING, seed=s).output_ids for s in range(50)] == first
    values, counts = long_run(target, drafter)
    failures = long_failures(values, counts)
    print(f"planted kv commit: {failures}")
    assert failures and "outside the target's support" in failures[0]
