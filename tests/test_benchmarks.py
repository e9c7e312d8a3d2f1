"""Micro-benchmarks (pytest-benchmark) of one decode step's two halves, per registered drafter, on the
tiny random Llama: ``drafter.propose`` right after a prefill, and the verify step (tree forward on a copy
of the prefilled cache + `verify_greedy` + `kv.commit_path`).

Two states are measured: right after a prefill of ``PROMPTS[1]`` (whose greedy root, 29, is not in the
prompt, so prompt lookup finds nothing and proposes the root alone), and after a prefill of ``PROMPTS[1]``
followed by its first 8 greedy tokens (which end in "60 62 60 62": prompt lookup proposes a real tree and
some of it is accepted).

pyproject's ``addopts`` passes ``--benchmark-disable``, so a normal test run calls each benchmarked
function once and checks its result; ``pytest tests/test_benchmarks.py --benchmark-enable`` times them.
Every round starts from the same state (a freshly reset drafter; a fresh copy of the prefilled cache), so
the cache never grows across rounds and every round measures the same step.

These check every drafter's step on a tiny model in each test run; the timed suite on the real model, with
saved baselines, is ``benchmarks/test_micro_*.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from conftest import PROMPTS, plain_greedy
from specbench import kv
from specbench.drafter import DraftContext
from specbench.registry import available_drafters
from specbench.tree import DraftTree
from specbench.verify import VerifyOutcome, verify_greedy

pytestmark = pytest.mark.usefixtures("single_thread")

NAMES = sorted(available_drafters())
BUDGET = 16
CONTINUED = 8  # greedy tokens appended to PROMPTS[1] for the "repeating" state
PROPOSE_ROUNDS = 200
VERIFY_ROUNDS = 50


class Prefilled:
    """The loop's state right after prefill, built the way `specbench.harness.loop.generate` builds it,
    and the plain-greedy continuation of the same prompt (root first) to check verification against."""

    def __init__(self, target, prompt_ids: list[int]) -> None:
        self.target = target
        with torch.inference_mode():
            self.cache = target.new_cache()
            prompt = torch.tensor(prompt_ids, dtype=torch.long)
            logits, self.hidden = target.prefill(prompt, self.cache)  # [V], [L, H]
        self.root = int(logits.argmax())
        self.past = len(prompt_ids)
        self.greedy = plain_greedy(target.model, prompt_ids, BUDGET + 1, target.eos_ids)
        assert self.greedy[0] == self.root
        self.buffer = torch.empty(self.past + 1, dtype=torch.long)
        self.buffer[: self.past] = prompt
        self.buffer[self.past] = self.root

    def context(self) -> DraftContext:
        return DraftContext(
            tokens=self.buffer[: self.past + 1],  # buffer view, root included
            root=self.root,
            hidden=self.hidden,
            target=self.target.handle,
            budget=BUDGET,
            span=lambda name: contextlib.nullcontext(),
        )

    def cache_copy(self):
        with torch.inference_mode():
            return copy.deepcopy(self.cache)


@pytest.fixture(scope="module")
def states(llama_target) -> dict[str, Prefilled]:
    prompt = list(PROMPTS[1])
    continued = prompt + plain_greedy(llama_target.model, prompt, CONTINUED, llama_target.eos_ids)
    return {"after_prompt": Prefilled(llama_target, prompt), "repeating": Prefilled(llama_target, continued)}


@pytest.fixture(params=["after_prompt", "repeating"])
def prefilled(request, states) -> Prefilled:
    return states[request.param]


def check_tree(tree: DraftTree, root: int, vocab: int) -> None:
    assert isinstance(tree, DraftTree)
    tree.validate(root, BUDGET)  # raises SpecbenchError naming the broken rule
    assert 1 <= len(tree) <= BUDGET
    assert int(tree.tokens[0]) == root
    assert int(tree.tokens.min()) >= 0 and int(tree.tokens.max()) < vocab


@pytest.mark.parametrize("name", NAMES)
def test_bench_propose(benchmark, name, prefilled, llama_target, drafter_for):
    drafter = drafter_for(name, llama_target)
    ctx = prefilled.context()
    tokens_before = ctx.tokens.clone()
    benchmark.group = "propose"

    def setup():
        drafter.reset(llama_target.handle)  # a fresh sequence each round: every round is the first step
        return (ctx,), {}

    tree = benchmark.pedantic(drafter.propose, setup=setup, rounds=PROPOSE_ROUNDS, warmup_rounds=5)
    check_tree(tree, prefilled.root, llama_target.config.vocab_size)
    assert torch.equal(ctx.tokens, tokens_before), "propose must not write into ctx.tokens"
    if name == "vanilla":
        assert len(tree) == 1
    if name == "ngram":
        # after PROMPTS[1] the root (29) occurs nowhere before: nothing to look up; mid-sequence the
        # context ends in "60 62 60 62" + root 60, which occurred before
        assert (len(tree) > 1) == (prefilled.root in prefilled.buffer[: prefilled.past].tolist())


@pytest.mark.parametrize("name", NAMES)
def test_bench_verify(benchmark, name, prefilled, llama_target, drafter_for):
    drafter = drafter_for(name, llama_target)
    drafter.reset(llama_target.handle)
    tree = drafter.propose(prefilled.context())
    check_tree(tree, prefilled.root, llama_target.config.vocab_size)
    benchmark.group = "verify"

    def setup():
        return (prefilled.cache_copy(),), {}

    def verify_step(cache) -> tuple[VerifyOutcome, int]:
        logits, hidden = llama_target.forward_tree(tree, cache)  # [n, V], [n, H]
        outcome = verify_greedy(tree, logits, hidden)
        kv.commit_path(cache, prefilled.past, outcome.path, len(tree))
        return outcome, kv.cached_length(cache)

    outcome, cached = benchmark.pedantic(verify_step, setup=setup, rounds=VERIFY_ROUNDS, warmup_rounds=2)
    assert outcome.path[0] == 0
    assert outcome.path == tree.path_to(outcome.path[-1])
    assert cached == prefilled.past + len(outcome.path)  # the tree's other slots were dropped
    assert kv.cached_length(prefilled.cache) == prefilled.past  # the shared prefilled cache is untouched
    # lossless: the path's tokens then the bonus are exactly what plain greedy decoding emits
    emitted = outcome.tokens + [outcome.bonus]
    assert emitted == prefilled.greedy[: len(emitted)]
    assert outcome.hidden.shape == (len(outcome.path), llama_target.config.hidden_size)
    root_children = [int(tree.tokens[i]) for i, parent in enumerate(tree.parents_list) if parent == 0]
    # a draft is accepted exactly when the greedy next token was proposed as a child of the root
    assert (outcome.accepted >= 1) == (prefilled.greedy[1] in root_children)
