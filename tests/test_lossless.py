"""Lossless: whatever a drafter proposes, `generate` emits exactly the ids of plain greedy decoding.

Oracle drafters know the reference continuation (from `plain_greedy`, no specbench code) and propose it
right everywhere, wrong from depth j, always wrong, or inside random trees drawn by hypothesis. Every
registered drafter is checked too, and so is the tree forward itself against one-token-at-a-time decoding
(the regression guard for the transformers version range: custom 4D masks, explicit positions and, for
Gemma3, per-layer-type sliding-window masks).
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EOS, PROMPTS, SLIDING_WINDOW, make_target, plain_greedy, sequential_logits
from specbench import DraftContext, Drafter, DraftTree, VerifyOutcome
from specbench.harness.loop import generate
from specbench.registry import available_drafters, create_drafter

pytestmark = pytest.mark.usefixtures("single_thread")

MAX_NEW = 24


def wrong(token: int) -> int:
    """A token other than ``token`` (and never EOS)."""
    return (token + 1) % EOS


class Oracle(Drafter):
    """Base for drafters that know the reference continuation.

    On every call it also checks the loop's side of the contract: the context's tokens are the prompt and
    the reference so far, the root is the next reference token, the hidden rows are those accepted since
    the previous call and the last one produces the root; and the outcome handed to ``accept`` agrees
    with the reference.
    """

    def __init__(self, prompt: list[int], reference: list[int]) -> None:
        super().__init__()
        self.prompt, self.reference = list(prompt), list(reference)
        self.calls = 0
        self.trees: list[DraftTree] = []

    def reset(self, target) -> None:
        self.target = target
        self.expect_rows = len(self.prompt)
        self.pos = None

    def truth(self, depth: int) -> list[int]:
        """The reference tokens after the current root, up to ``depth`` of them."""
        return self.reference[self.pos + 1 : self.pos + 1 + depth]

    def propose(self, ctx: DraftContext) -> DraftTree:
        self.calls += 1
        self.pos = len(ctx.tokens) - len(self.prompt) - 1  # index of the root in the output
        assert ctx.tokens.tolist() == self.prompt + self.reference[: self.pos + 1]
        assert ctx.root == self.reference[self.pos] == int(ctx.tokens[-1])
        assert ctx.hidden.shape == (self.expect_rows, self.target.config.hidden_size)
        assert int(self.target.lm_head(ctx.hidden[-1]).argmax()) == ctx.root
        tree = self.draft(ctx)
        self.trees.append(tree)
        return tree

    def draft(self, ctx: DraftContext) -> DraftTree:
        raise NotImplementedError

    def accept(self, outcome: VerifyOutcome) -> None:
        accepted = outcome.tokens[1:]
        assert accepted == self.truth(len(accepted))
        if self.pos + 1 + len(accepted) < len(self.reference):
            assert outcome.bonus == self.reference[self.pos + 1 + len(accepted)]
        assert outcome.hidden.shape[0] == len(outcome.path)
        self.expect_rows = len(outcome.path)


class RightChain(Oracle):
    """The true continuation as a chain, as deep as the budget allows."""

    def draft(self, ctx):
        return DraftTree.chain(ctx.root, self.truth(ctx.budget - 1))


class RightTree(Oracle):
    """A tree with a wrong decoy sibling before the true node at every depth (and a wrong child under
    each decoy), so the verifier has to pick the right branch; the true node is never node 1."""

    def draft(self, ctx):
        tokens, parents, node = [ctx.root], [-1], 0
        for tok in self.truth(ctx.budget):
            if len(tokens) + 3 > ctx.budget:
                break
            decoy = len(tokens)
            tokens += [wrong(tok), tok, wrong(wrong(tok))]
            parents += [node, node, decoy]
            node = decoy + 1
        return DraftTree(torch.tensor(tokens), torch.tensor(parents))


class WrongFrom(Oracle):
    """A chain of ``depth`` tokens: right before depth ``j``, wrong from depth ``j`` on (j = 1: always
    wrong), so every step emits exactly ``j`` tokens (j - 1 accepted + the bonus)."""

    def __init__(self, prompt, reference, j: int, depth: int = 6) -> None:
        super().__init__(prompt, reference)
        self.j, self.depth = j, depth

    def draft(self, ctx):
        truth = self.truth(self.depth)
        truth += [0] * (self.depth - len(truth))
        drafts = truth[: self.j - 1] + [wrong(t) for t in truth[self.j - 1 :]]
        return DraftTree.chain(ctx.root, drafts[: ctx.budget - 1])


class RandomTrees(Oracle):
    """Random trees within the budget (random parents and tokens); with ``embed`` the true continuation
    is written along the path to a random node, so it sits at a random branch."""

    def __init__(self, prompt, reference, rng: random.Random, embed: float, bushy: bool) -> None:
        super().__init__(prompt, reference)
        self.rng, self.embed, self.bushy = rng, embed, bushy

    def draft(self, ctx):
        rng = self.rng
        n = rng.randint(1, ctx.budget)
        parents = [-1] + [rng.randrange(i) if self.bushy else rng.randrange(max(0, i - 2), i) for i in range(1, n)]
        tokens = [ctx.root] + [rng.randrange(EOS + 1) for _ in range(1, n)]  # EOS may be drafted too
        tree = DraftTree(torch.tensor(tokens), torch.tensor(parents))
        if n > 1 and rng.random() < self.embed:
            path = tree.path_to(rng.randrange(1, n))
            truth = self.truth(len(path) - 1)
            for node, tok in zip(path[1:], truth):
                tokens[node] = tok
            tree = DraftTree(torch.tensor(tokens), torch.tensor(parents))
        return tree


def run(target, drafter, prompt, max_new=MAX_NEW, budget=8):
    result = generate(target, drafter, prompt, max_new, budget)
    # bookkeeping: the prefill's root plus every step's emitted tokens
    assert sum(result.accept_lengths) + 1 == len(result.output_ids)
    assert all(a >= 1 for a in result.accept_lengths)
    return result


def check_steps(result, drafter: Oracle) -> None:
    assert len(result.steps) == len(drafter.trees)
    for step, tree in zip(result.steps, drafter.trees):
        assert step.nodes == len(tree)
        assert step.depth == tree.max_depth()


# ---- oracle drafters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS, ids=[f"prompt{i}" for i in range(len(PROMPTS))])
@pytest.mark.parametrize("budget", [2, 5, 16])
def test_right_chain(tiny_target, reference, prompt, budget):
    ref = reference(prompt, MAX_NEW + budget)
    drafter = RightChain(prompt, ref)
    result = run(tiny_target, drafter, prompt, budget=budget)
    assert result.output_ids == ref[:MAX_NEW]
    check_steps(result, drafter)
    # every step but the last (cut at max_new_tokens) emits budget - 1 accepted + 1 bonus
    assert all(a == budget for a in result.accept_lengths[:-1])
    assert result.accept_lengths[-1] <= budget
    tau = sum(result.accept_lengths) / len(result.accept_lengths)
    assert tau > 1


@pytest.mark.parametrize("budget", [4, 7, 16])
def test_right_tree_picks_the_right_branch(tiny_target, reference, budget):
    prompt = PROMPTS[0]
    ref = reference(prompt, MAX_NEW + budget)
    drafter = RightTree(prompt, ref)
    result = run(tiny_target, drafter, prompt, budget=budget)
    assert result.output_ids == ref[:MAX_NEW]
    check_steps(result, drafter)
    per_step = (budget - 1) // 3 + 1  # one true node per three nodes, plus the bonus
    assert all(a == per_step for a in result.accept_lengths[:-1])
    assert sum(result.accept_lengths) / len(result.accept_lengths) > 1


@pytest.mark.parametrize("j", [1, 2, 3, 5])
def test_wrong_from_depth_j(tiny_target, reference, j):
    prompt = PROMPTS[2]
    ref = reference(prompt, MAX_NEW + 8)
    drafter = WrongFrom(prompt, ref, j=j, depth=6)
    result = run(tiny_target, drafter, prompt, budget=8)
    assert result.output_ids == ref[:MAX_NEW]
    check_steps(result, drafter)
    assert all(a == j for a in result.accept_lengths[:-1])
    assert result.accept_lengths[-1] <= j


def test_always_wrong_bushy_tree(tiny_target, reference):
    """Every first-level node wrong (a whole budget of them): one token per step, like vanilla."""

    class AllWrong(Oracle):
        def draft(self, ctx):
            (true,) = self.truth(1) or [0]
            siblings = [t for t in range(EOS) if t != true][: ctx.budget - 1]
            return DraftTree(torch.tensor([ctx.root, *siblings]), torch.tensor([-1] + [0] * len(siblings)))

    prompt = PROMPTS[1]
    ref = reference(prompt, MAX_NEW + 1)
    drafter = AllWrong(prompt, ref)
    result = run(tiny_target, drafter, prompt, budget=16)
    assert result.output_ids == ref[:MAX_NEW]
    assert result.accept_lengths == [1] * (MAX_NEW - 1)


@pytest.mark.parametrize("max_new", [1, 2, 3, 10])
def test_max_new_tokens_cuts_inside_a_step(tiny_target, reference, max_new):
    prompt = PROMPTS[0]
    ref = reference(prompt, max_new + 8)
    result = run(tiny_target, RightChain(prompt, ref), prompt, max_new=max_new, budget=8)
    assert result.output_ids == ref[:max_new]
    assert not result.stopped_at_eos
    assert len(result.steps) == (0 if max_new == 1 else 1 + (max_new - 2) // 8)


def test_max_new_tokens_must_be_positive(tiny_target):
    with pytest.raises(ValueError):
        generate(tiny_target, RightChain(PROMPTS[0], []), PROMPTS[0], 0, 4)


@pytest.mark.parametrize("eos_at", [0, 1, 4, 9])
def test_eos_stops_inside_a_step(tiny_target, reference, eos_at):
    """EOS emitted mid-step (inside an accepted chain) ends the output right after it, like plain greedy."""
    prompt = PROMPTS[0]
    ref = reference(prompt, 40)
    eos = ref[eos_at]
    target = make_target(tiny_target.model, eos_token_id=eos)
    assert target.eos_ids == {EOS, eos}
    expected = plain_greedy(target.model, prompt, 40, target.eos_ids)
    assert expected == ref[: ref.index(eos) + 1]
    result = run(target, RightChain(prompt, ref), prompt, max_new=40, budget=6)
    assert result.output_ids == expected
    assert result.stopped_at_eos


# ---- random trees (hypothesis) ------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt_index=st.integers(0, len(PROMPTS) - 1),
    budget=st.integers(1, 16),
    seed=st.integers(0, 2**32 - 1),
    embed=st.sampled_from([0.0, 0.5, 1.0]),
    bushy=st.booleans(),
)
def test_random_trees_are_lossless(tiny_target, reference, prompt_index, budget, seed, embed, bushy):
    prompt = PROMPTS[prompt_index]
    ref = reference(prompt, MAX_NEW + 16)
    drafter = RandomTrees(prompt, ref, random.Random(seed), embed, bushy)
    result = run(tiny_target, drafter, prompt, budget=budget)
    assert result.output_ids == ref[:MAX_NEW]
    check_steps(result, drafter)
    for step, tree in zip(result.steps, drafter.trees):
        assert 1 <= step.accepted <= tree.max_depth() + 1


# ---- every registered drafter -------------------------------------------------------------------------


#: What the exactness test below is parametrised over: whatever the entry points list.
REGISTERED = sorted(available_drafters())


def test_builtins_are_registered():
    """Every built-in is among the names the exactness test runs (a built-in dropped from the
    entry-point metadata must fail here, not silently leave the test), each from specbench itself."""
    from test_builtin_drafters import BUILTINS

    missing = sorted(set(BUILTINS) - set(REGISTERED))
    assert not missing, f"the exactness test does not run the built-ins {missing}"
    sources = available_drafters()
    assert {name: sources[name].origin for name in BUILTINS} == {name: "entry point of specbench" for name in BUILTINS}


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("budget", [1, 8])
def test_registered_drafter_is_lossless(tiny_target, reference, drafter_for, name, budget):
    drafter = drafter_for(name, tiny_target)
    for prompt in PROMPTS:  # one instance across sequences: reset must forget the previous one
        result = run(tiny_target, drafter, prompt, max_new=32, budget=budget)
        assert result.output_ids == reference(prompt, 32)
        if name == "vanilla" or budget == 1:
            assert result.accept_lengths == [1] * 31


@pytest.mark.parametrize(
    "options",
    [dict(max_candidates=1), dict(max_candidates=6, max_depth=3), dict(min_ngram=1, max_ngram=1), dict(min_ngram=2, max_ngram=4)],
    ids=["chain", "wide", "unigram", "long-ngrams"],
)
def test_ngram_options_are_lossless(tiny_target, reference, options):
    drafter = create_drafter("ngram", **options)
    for prompt in PROMPTS:
        result = run(tiny_target, drafter, prompt, max_new=40, budget=12)
        assert result.output_ids == reference(prompt, 40)


def test_ngram_accepts_on_a_repetitive_sequence(tiny_target, reference):
    """Greedy output of the tiny models falls into loops, which prompt lookup must exploit."""
    drafter = create_drafter("ngram")
    accepted = 0
    for prompt in PROMPTS:
        result = run(tiny_target, drafter, prompt, max_new=48, budget=12)
        assert result.output_ids == reference(prompt, 48)
        accepted += sum(result.accept_lengths) - len(result.accept_lengths)
    assert accepted > 0


# ---- the tree forward equals sequential decoding --------------------------------------------------------


def guard_trees() -> list[DraftTree]:
    rng = random.Random(3)
    trees = [DraftTree.chain(11, [rng.randrange(EOS) for _ in range(3 * SLIDING_WINDOW)])]
    for deep in (False, True):
        parents = [-1] + [rng.randrange(max(0, i - 2) if deep else 0, i) for i in range(1, 16)]
        trees.append(DraftTree(torch.tensor([rng.randrange(EOS) for _ in parents]), torch.tensor(parents)))
    return trees


@pytest.mark.parametrize("tree", guard_trees(), ids=["deep-chain", "bushy-tree", "deep-tree"])
@pytest.mark.parametrize("prompt", [PROMPTS[0], PROMPTS[3]], ids=["prompt12", "prompt1"])
def test_tree_forward_equals_sequential_decoding(tiny_target, prompt, tree):
    assert tree.max_depth() > SLIDING_WINDOW  # windowed layers must cut some ancestors
    cache = tiny_target.new_cache()
    tiny_target.prefill(torch.tensor(prompt), cache)
    logits, hidden = tiny_target.forward_tree(tree, cache)
    assert logits.shape == (len(tree), tiny_target.config.vocab_size)
    assert hidden.shape == (len(tree), tiny_target.config.hidden_size)
    tokens = tree.tokens.tolist()
    for node in range(len(tree)):
        path_tokens = [tokens[i] for i in tree.path_to(node)]
        expected = sequential_logits(tiny_target.model, prompt + path_tokens)[-1]
        assert int(logits[node].argmax()) == int(expected.argmax()), f"node {node}"
        torch.testing.assert_close(logits[node], expected, atol=1e-4, rtol=0)


def test_gemma3_window_is_really_exercised():
    """Sanity check of the guard above: without the sliding-window mask the deep nodes of a Gemma3
    tree disagree with sequential decoding, so the guard would catch a lost window."""
    from conftest import build_tiny_model

    target = make_target(build_tiny_model("gemma3"))
    assert target.sliding_window == SLIDING_WINDOW
    tree = guard_trees()[0]
    prompt = PROMPTS[0]

    def tree_logits():
        cache = target.new_cache()
        target.prefill(torch.tensor(prompt), cache)
        return target.forward_tree(tree, cache)[0]

    expected = sequential_logits(target.model, prompt + tree.tokens.tolist())[len(prompt) :]
    torch.testing.assert_close(tree_logits(), expected, atol=1e-4, rtol=0)
    target.sliding_window = None  # simulate a lost window: the full ancestor mask for every layer
    assert (tree_logits() - expected).abs().max() > 1e-3
