"""The CTC-drafter: collapse and prefix beam search on literal examples and against brute force, blank
handling, depth renumbering of collapsed candidates, the module's cached inference against its training
forward, a CI-sized training run for ctc and its cross-entropy ablation, and lossless drafting."""

from __future__ import annotations

import doctest
import itertools
import json
import math
import random
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import distil_random_prompts, plain_greedy
from specbench.drafter import DraftContext
from specbench.drafters import ctc_transform
from specbench.drafters.ctc import CTCCrossEntropyDrafter, CTCDrafter
from specbench.drafters.ctc_module import AttentionDraftModule, ContextCache
from specbench.drafters.ctc_transform import candidate_tree, collapse, prefix_beam_search, slot_candidates
from specbench.drafters.training.ctc import CTCTrainConfig, accepted_length, rescore, train_ctc
from specbench.drafters.training.distill import iter_samples
from specbench.errors import SpecbenchError
from specbench.harness.autobudget.replay import TrajectoryTarget
from specbench.harness.autobudget.trajectories import Trajectory
from specbench.harness.loop import generate
from specbench.tree import DraftTree

BLANK = -1


def test_doctests_of_the_transform():
    result = doctest.testmod(ctc_transform)
    assert result.attempted >= 4 and result.failed == 0


@pytest.mark.parametrize("alignment, expected", [
    ([4, 4, 4, 4], (4,)),
    ([4, BLANK, 4], (4, 4)),
    ([BLANK, 4, 5, 5, BLANK, 6], (4, 5, 6)),
    ([BLANK, BLANK, BLANK], ()),
    ([4, 5, 4, 5], (4, 5, 4, 5)),
    ([], ()),
])
def test_collapse_literals(alignment, expected):
    assert collapse(alignment, blank=BLANK) == expected


def brute_force(slot_tokens, slot_probs, blank_probs):
    """P(collapse(alignment) = c) summed over every alignment of the kept classes."""
    totals: dict[tuple[int, ...], float] = {}
    choices = [list(zip(tokens, probs)) + ([(BLANK, blank_probs[t])] if blank_probs else [])
               for t, (tokens, probs) in enumerate(zip(slot_tokens, slot_probs))]
    for alignment in itertools.product(*choices):
        labels = [label for label, _ in alignment]
        p = math.prod(prob for _, prob in alignment)
        key = collapse(labels, BLANK) if blank_probs else tuple(labels)
        totals[key] = totals.get(key, 0.0) + p
    return totals


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.booleans(), st.integers(0, 10_000))
def test_prefix_beam_search_equals_brute_force_with_a_wide_beam(slots, k, with_blank, seed):
    rng = random.Random(seed)
    slot_tokens = [rng.sample(range(3), k) for _ in range(slots)]  # few tokens, so repeats are common
    slot_probs, blank_probs = [], []
    for _ in range(slots):
        weights = [rng.random() + 1e-3 for _ in range(k + 1)]
        total = sum(weights)
        slot_probs.append([w / total for w in weights[:k]])
        blank_probs.append(weights[k] / total)
    blanks = blank_probs if with_blank else None
    found = dict(prefix_beam_search(slot_tokens, slot_probs, blanks, beam=10_000))
    expected = {c: p for c, p in brute_force(slot_tokens, slot_probs, blanks).items() if p > 0}
    assert found.keys() == expected.keys()
    for candidate, p in expected.items():
        assert found[candidate] == pytest.approx(p, rel=1e-9, abs=1e-15)


def test_prefix_beam_search_merges_duplicates_and_keeps_the_beam():
    # "9 9 _", "9 _ _", "_ 9 _", "_ _ 9", "9 _ 9"... every candidate appears once, best first
    tokens, probs, blanks = [[9]] * 3, [[0.5]] * 3, [0.5] * 3
    found = prefix_beam_search(tokens, probs, blanks, beam=3)
    assert len(found) == len({c for c, _ in found}) <= 3
    assert [p for _, p in found] == sorted((p for _, p in found), reverse=True)
    assert found[0][0] == (9,)  # 9 9 9 / 9 9 _ / 9 _ _ / _ 9 9 / ... : 6 of the 8 alignments


def test_repeat_needs_a_blank_between():
    # certain "4 4" in two slots is one 4; with a certain blank between it is two
    assert prefix_beam_search([[4], [4]], [[1.0], [1.0]], [0.0, 0.0], beam=4) == [((4,), 1.0)]
    assert prefix_beam_search([[4], [4], [4]], [[1.0], [0.0], [1.0]], [0.0, 1.0, 0.0], beam=4)[0] == ((4, 4), 1.0)


def test_candidate_tree_renumbers_positions_by_depth_and_respects_the_budget():
    # "4 4 _ 4 5 5" collapses to (4, 4, 5): three drafted nodes at depths 1, 2, 3, not slots 1, 4, 5
    candidate = collapse([4, 4, BLANK, 4, 5, 5], BLANK)
    tree = candidate_tree(11, [(candidate, 0.9)], budget=16)
    assert tree.tokens.tolist() == [11, 4, 4, 5] and tree.depths() == [0, 1, 2, 3]
    candidates = [((1, 2, 3), 0.4), ((1, 2, 4), 0.3), ((5,), 0.2), ((1, 6), 0.05)]
    for budget in range(1, 9):
        small = candidate_tree(0, candidates, budget)
        small.validate(0, budget)
        assert len(small) == min(budget, 7)
    # the heaviest nodes first: (1) .75, (1,2) .7, (1,2,3) .4, (1,2,4) .3, (5) .2
    chosen = candidate_tree(0, candidates, 6)  # nodes in breadth-first order, parents first
    assert chosen.tokens.tolist() == [0, 1, 5, 2, 3, 4] and chosen.parents.tolist() == [-1, 0, 0, 1, 3, 3]
    assert candidate_tree(0, [((), 1.0)], 8).tokens.tolist() == [0]


def test_slot_candidates_keep_the_best_and_report_the_blank():
    logits = torch.tensor([[2.0, 0.0, -9.0, 1.0], [-9.0, -9.0, 5.0, -9.0]])  # 3 tokens + blank
    tokens, probs, blanks = slot_candidates(logits, has_blank=True, top_k=2, min_prob=0.05)
    full = logits.softmax(-1)
    assert tokens == [[0, 1], [2]] and blanks == pytest.approx(full[:, 3].tolist())
    assert probs[0] == pytest.approx(full[0, :2].tolist())
    tokens, _, blanks = slot_candidates(logits, has_blank=False, top_k=1, min_prob=0.0)
    assert tokens == [[0], [2]] and blanks is None


def test_accepted_length_walks_the_truth():
    tree = DraftTree.from_sequences(7, [[1, 2, 3], [1, 4]])
    assert accepted_length(tree, [1, 2, 3, 9]) == 4
    assert accepted_length(tree, [1, 4, 4]) == 3
    assert accepted_length(tree, [5]) == 1


@pytest.mark.parametrize("blank", [True, False])
def test_cached_inference_equals_the_training_forward(blank):
    torch.manual_seed(0)
    module = AttentionDraftModule(32, num_slots=4, num_heads=4, blank=blank)
    for p in module.parameters():  # leave the zero/identity initialisation so every path matters
        torch.nn.init.normal_(p, std=0.2)
    lm_head = torch.nn.Linear(32, 11, bias=False)
    hidden, following = torch.randn(9, 32), torch.randn(9, 32)  # positions 0..8, embeddings of tokens 1..9
    anchors = torch.tensor([2, 5, 8])
    with torch.no_grad():
        batched = module.logits(module.forward_sequence(hidden, following, anchors), lm_head)  # [3, T, C]
        cache = ContextCache()
        for start, stop in [(0, 3), (3, 6), (6, 9)]:  # grown in steps, as accepted paths arrive
            cache.extend(module, start, hidden[start:stop], following[start:stop])
            torch.testing.assert_close(cache.draft_logits(module, lm_head), batched[start // 3], rtol=1e-5, atol=1e-5)
    assert batched.shape == (3, 4, 11 + blank)


@pytest.fixture(scope="module")
def cache(llama_target, tmp_path_factory):
    return distil_random_prompts(llama_target, tmp_path_factory.mktemp("distill"), seed=1)


@pytest.mark.parametrize("method, drafter_class", [("ctc", CTCDrafter), ("ctc-ce", CTCCrossEntropyDrafter)])
def test_training_lowers_loss_round_trips_and_drafts_losslessly(method, drafter_class, llama_target, cache, tmp_path):
    # ctc takes the packed path an accelerator takes by default (tested equal to the per-sample one below)
    config = CTCTrainConfig(method=method, cache=str(cache), out=str(tmp_path / method), num_slots=4, num_labels=2,
                            epochs=3, lr=1e-2, samples_per_step=2, warmup_steps=2, eval_budgets=[2, 6],
                            packed=method == "ctc")
    recipe = train_ctc(config, llama_target, progress=False)
    history = recipe["history"]
    assert history[-1]["last_tenth_loss"] < history[0]["first_tenth_loss"]
    saved = json.loads((tmp_path / f"{method}.json").read_text())
    assert saved["metrics"] == recipe["metrics"] and saved["method"] == method
    taus = recipe["metrics"]["heldout_tau_by_budget"]
    assert 1.0 <= taus["2"] <= taus["6"] <= 1 + 4
    assert (tmp_path / f"{method}.epoch3.pt").exists()
    resumed = train_ctc(config, llama_target, progress=False)["metrics"]  # picks up after epoch 3: same weights
    timing = "transform_ms_per_anchor"
    assert {k: v for k, v in resumed.items() if k != timing} == {k: v for k, v in recipe["metrics"].items() if k != timing}

    drafter = drafter_class(checkpoint=str(tmp_path / method))
    for prompt in ([5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4]):
        for budget in (1, 3, 12):
            result = generate(llama_target, drafter, prompt, max_new_tokens=30, budget=budget)
            assert result.output_ids == plain_greedy(llama_target.model, prompt, 30, llama_target.eos_ids)
    assert (drafter.module.blank is not None) == (method == "ctc")
    # the recorded decode-walk tau is what a greedy replay of the held-out responses accepts
    walk = recipe["metrics"]["heldout_walk_tau_by_budget"]
    assert set(walk) == {"2", "6"} and all(1.0 <= walk[b] <= 1 + 4 for b in walk)
    for budget in (2, 6):
        replayed = [step.accepted for sample in iter_samples(cache, "heldout") for step in generate(
            TrajectoryTarget(llama_target, Trajectory(sample.input_ids[: sample.prompt_len],
                                                      sample.input_ids[sample.prompt_len:], sample.hidden.float())),
            drafter, sample.input_ids[: sample.prompt_len].tolist(), len(sample.input_ids) - sample.prompt_len,
            budget).steps]
        assert sum(replayed) / len(replayed) == pytest.approx(walk[str(budget)])
    # a draft vocabulary of the 6 most frequent tokens: every proposed token is one of them (with
    # context_vocab, one of them or a token of the sequence so far), output exact either way
    greedy = plain_greedy(llama_target.model, [5, 17, 42, 8], 30, llama_target.eos_ids)
    for context_vocab in (False, True):
        cut = drafter_class(checkpoint=str(tmp_path / method), draft_vocab=6, context_vocab=context_vocab)
        proposed: set[int] = set()
        seen: set[int] = set()
        original = cut.propose

        def recording(ctx, original=original, proposed=proposed, seen=seen):
            seen.update(ctx.tokens.tolist())
            tree = original(ctx)
            proposed.update(tree.tokens[1:].tolist())
            return tree

        cut.propose = recording
        result = generate(llama_target, cut, [5, 17, 42, 8], max_new_tokens=30, budget=12)
        assert result.output_ids == greedy
        allowed = set(cut.vocab.ids.tolist()) | (seen if context_vocab else set())
        assert proposed and proposed <= allowed


def test_training_continues_from_a_checkpoint_and_refuses_one_that_does_not_fit(llama_target, cache, tmp_path):
    """--init-from loads the whole module (at lr 0 the held-out metrics are the loaded checkpoint's, so
    every weight and the draft vocabulary came across), records where it started, and refuses a checkpoint
    of the other method or another slot count in one line."""
    def config(method: str, out: str, **options) -> CTCTrainConfig:
        return CTCTrainConfig(method=method, cache=str(cache), out=str(tmp_path / out), num_slots=4, num_labels=2,
                              epochs=1, samples_per_step=2, warmup_steps=2, eval_budgets=[2, 6], train_vocab=24,
                              **{"lr": 1e-2} | options)

    first = train_ctc(config("ctc", "first"), llama_target, progress=False)
    again = train_ctc(config("ctc", "again", lr=0.0, init_from=str(tmp_path / "first")), llama_target, progress=False)
    loss = "heldout_loss"  # equal up to the checkpoint's float16 storage (~1e-5 relative), as rescore's
    assert again["metrics"][loss] == pytest.approx(first["metrics"][loss], rel=1e-4)
    for name in ("heldout_tau_by_budget", "heldout_walk_tau_by_budget", "heldout_anchors", "heldout_vocab"):
        assert again["metrics"][name] == first["metrics"][name]
    assert again["hyperparameters"]["initialised_from"]["checkpoint"] == "first"
    assert again["hyperparameters"]["initialised_from"]["heldout_loss"] == first["metrics"]["heldout_loss"]
    onward = train_ctc(config("ctc", "onward", init_from=str(tmp_path / "first")), llama_target, progress=False)
    assert onward["metrics"][loss] != pytest.approx(first["metrics"][loss], rel=1e-4)
    with pytest.raises(SpecbenchError, match="--init-from .*a ctc checkpoint, not ctc-ce"):
        train_ctc(config("ctc-ce", "x", init_from=str(tmp_path / "first")), llama_target, progress=False)
    wider = config("ctc", "y", init_from=str(tmp_path / "first"))
    wider.num_slots = 5
    with pytest.raises(SpecbenchError, match="--init-from .*num_slots is 4, not 5"):
        train_ctc(wider, llama_target, progress=False)


def test_ctc_needs_fewer_labels_than_slots(llama_target, cache, tmp_path):
    config = CTCTrainConfig(method="ctc", cache=str(cache), out=str(tmp_path / "x"), num_slots=4, num_labels=4)
    with pytest.raises(SpecbenchError, match="num-labels"):
        train_ctc(config, llama_target, progress=False)


def test_drafter_refuses_to_skip_reset(llama_target, drafter_for):
    drafter = drafter_for("ctc", llama_target)
    generate(llama_target, drafter, [5, 17, 42], max_new_tokens=5, budget=4)
    ctx = DraftContext(tokens=torch.tensor([1, 2, 3]), root=3, hidden=torch.zeros(2, 32), target=llama_target.handle,
                       budget=4, span=lambda name: nullcontext())
    with pytest.raises(RuntimeError, match="reset"):
        drafter.propose(ctx)


def test_anchor_subsets_are_seeded_and_keep_everything_when_large(llama_target, cache):
    from specbench.drafters.ctc_module import build_module
    from specbench.drafters.training.ctc import sample_loss

    sample = next(iter_samples(cache, "train"))
    module = build_module("ctc", 32, 4, 4)
    with torch.no_grad():
        full = sample_loss(module, llama_target, sample, 2)
        assert sample_loss(module, llama_target, sample, 2, keep=1000) == full
        picks = [sample_loss(module, llama_target, sample, 2, keep=3, generator=torch.Generator().manual_seed(s))
                 for s in (0, 0, 1)]
    assert picks[0] == picks[1] != picks[2] and torch.isfinite(picks[0])


@pytest.mark.parametrize("method", ["ctc", "ctc-ce"])
@pytest.mark.parametrize("cut", [None, 12])
def test_packed_samples_give_the_per_sample_losses_and_gradients(method, cut, llama_target, cache):
    """One forward over a step's samples packed end to end (training's path) equals a forward per sample:
    the same anchors are drawn, each sample sees only its own context at its own RoPE positions, and the
    losses and gradients match; a sample without anchors is skipped by both."""
    from specbench.drafters.ctc_module import build_module
    from specbench.drafters.training.common import training_vocabularies
    from specbench.drafters.training.ctc import packed_losses, sample_loss
    from specbench.drafters.training.distill import Sample

    first, *others = list(iter_samples(cache, "train"))[:3]
    end = first.prompt_len + 2  # two response tokens: no anchor with two labels after the root
    short = Sample(first.input_ids[:end], first.prompt_len, first.hidden[:end])
    batch = [first, short, *others]
    vocab = training_vocabularies(cache, llama_target, cut)[1] if cut else None
    torch.manual_seed(3)
    module = build_module(method, 32, 4, 4)
    with torch.no_grad():
        for parameter in module.parameters():  # leave the zero initialisation: every branch contributes
            parameter.add_(0.1 * torch.randn_like(parameter))

    def gradients(loss: torch.Tensor) -> list[torch.Tensor]:
        module.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in module.parameters() if p.grad is not None]

    picks = torch.Generator().manual_seed(0)
    alone = [sample_loss(module, llama_target, s, 2, keep=3, generator=picks, vocab=vocab) for s in batch]
    assert alone[1] is None
    alone = torch.stack([loss for loss in alone if loss is not None])  # [3]
    expected = gradients(alone.sum() / len(batch))
    packed = packed_losses(module, llama_target, batch, 2, keep=3, generator=torch.Generator().manual_seed(0), vocab=vocab)
    assert packed.shape == (3,)
    torch.testing.assert_close(packed, alone.detach(), rtol=1e-5, atol=1e-5)
    for got, want in zip(gradients(packed.sum() / len(batch)), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert packed_losses(module, llama_target, [short], 2) is None


def test_a_response_shorter_than_the_horizon_has_no_anchors():
    from specbench.drafters.training.ctc import anchors_of
    from specbench.drafters.training.distill import Sample

    short = Sample(torch.tensor([1, 2, 3, 4, 5]), prompt_len=3, hidden=torch.zeros(5, 8))  # 2 response tokens
    assert anchors_of(short, 1).tolist() == [2] and anchors_of(short, 6).tolist() == []


@pytest.mark.parametrize("method, drafter_class", [("ctc", CTCDrafter), ("ctc-ce", CTCCrossEntropyDrafter)])
def test_training_over_a_cut_vocabulary(method, drafter_class, llama_target, cache, tmp_path):
    """Slots score the 24 most frequent tokens (+ blank) in training; CTC anchors with a label outside the
    cut are left out, CE labels outside it ignored; the loss falls and the drafter over the same cut is exact."""
    config = CTCTrainConfig(method=method, cache=str(cache), out=str(tmp_path / method), num_slots=4, num_labels=2,
                            epochs=3, lr=1e-2, samples_per_step=2, warmup_steps=2, eval_budgets=[2, 6], train_vocab=24)
    recipe = train_ctc(config, llama_target, progress=False)
    assert recipe["history"][-1]["last_tenth_loss"] < recipe["history"][0]["first_tenth_loss"]
    assert recipe["hyperparameters"]["train_vocab"] == 24 and recipe["metrics"]["heldout_vocab"] == 24
    drafter = drafter_class(checkpoint=str(tmp_path / method), draft_vocab=24)
    result = generate(llama_target, drafter, [5, 17, 42, 8], max_new_tokens=30, budget=8)
    assert result.output_ids == plain_greedy(llama_target.model, [5, 17, 42, 8], 30, llama_target.eos_ids)
    # scored again (as scripts/ctc_offline_tau.py does): the same search gives the recorded metrics (the
    # held-out loss up to float rounding, ~1e-5 relative between the trained and the reloaded module)
    rescored = rescore(tmp_path / method, cache, llama_target, budgets=[2, 6])
    recorded = recipe["metrics"]
    assert rescored["heldout_tau_by_budget"] == recorded["heldout_tau_by_budget"]
    assert rescored["heldout_anchors"] == recorded["heldout_anchors"]
    assert rescored["heldout_loss"] == pytest.approx(recorded["heldout_loss"], rel=1e-4)


def test_rescore_refuses_a_checkpoint_of_another_method(llama_target, cache, tmp_path):
    (tmp_path / "heads.json").write_text(json.dumps({"method": "medusa"}))
    with pytest.raises(SpecbenchError, match="not a ctc or ctc-ce checkpoint"):
        rescore(tmp_path / "heads", cache, llama_target)


@pytest.mark.parametrize("arguments, message", [
    (["heads"], "not a ctc or ctc-ce checkpoint"),
    (["missing"], "no checkpoint recipe"),
    (["heads", "--budgets", "0,4"], "--budgets"),
])
def test_offline_tau_script_refuses_bad_input_in_one_line(tmp_path, arguments, message):
    """Bad stems are refused before the model loads: one line on stderr, exit 2."""
    (tmp_path / "heads.json").write_text(json.dumps({"method": "medusa"}))
    script = Path(__file__).resolve().parents[1] / "scripts" / "ctc_offline_tau.py"
    stems = [str(tmp_path / a) if i == 0 else a for i, a in enumerate(arguments)]
    done = subprocess.run([sys.executable, str(script), "--cache", str(tmp_path), *stems], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1] and "Traceback" not in done.stderr


def test_the_default_beam_covers_the_budget_and_search_settings_are_part_of_the_identity(llama_target, drafter_for,
                                                                                      monkeypatch):
    """A beam narrower than the tree budget cannot fill the tree, so by default it is the budget (at least
    `MIN_BEAM`); an explicit beam is kept. Search settings change proposals, so they key cached curves."""
    import specbench.drafters.ctc as ctc_module

    beams: list[int] = []
    search = ctc_module.prefix_beam_search
    monkeypatch.setattr(ctc_module, "prefix_beam_search", lambda *a: beams.append(a[3]) or search(*a))
    drafter = drafter_for("ctc", llama_target)
    for budget, explicit, expected in ((4, None, ctc_module.MIN_BEAM), (48, None, 48), (48, 16, 16)):
        beams.clear()
        drafter.beam = explicit
        generate(llama_target, drafter, [5, 17, 42, 8], max_new_tokens=6, budget=budget)
        assert beams and set(beams) == {expected}
    drafter.beam = None
    default = drafter.identity()
    drafter.top_k = 4
    assert drafter.identity() != default and "top_k=4" in drafter.identity()


def test_offline_estimate_searches_as_the_drafter_does(llama_target, cache, monkeypatch):
    """Training's offline tau uses the drafter's default search (top_k, and a beam of the budget, at least
    `MIN_BEAM`), one search per distinct beam width, so a recipe's estimate describes the shipped drafter."""
    import specbench.drafters.training.ctc as training
    from specbench.drafters.ctc_module import build_module
    from specbench.drafters.ctc_transform import DEFAULT_TOP_K, MIN_BEAM

    beams: list[int] = []
    search = training.prefix_beam_search
    monkeypatch.setattr(training, "prefix_beam_search", lambda *a: beams.append(a[3]) or search(*a))
    config = CTCTrainConfig(method="ctc", cache=str(cache), out="unused", num_slots=4, num_labels=2,
                            eval_budgets=[2, 8, MIN_BEAM + 16])
    assert config.top_k == CTCDrafter().top_k == DEFAULT_TOP_K and config.beam is None
    module = build_module("ctc", llama_target.config.hidden_size, llama_target.config.num_attention_heads, 4)
    samples = list(iter_samples(cache, "heldout"))[:2]
    metrics = training.evaluate(module, llama_target, samples, config)
    roots = sum(len(training.anchors_of(sample, 1)) for sample in samples)  # every root of the decode walk
    assert 0 < metrics["heldout_anchors"] < roots
    assert len(beams) == 2 * roots and set(beams) == {MIN_BEAM, MIN_BEAM + 16}
    config.beam = 5
    beams.clear()
    training.evaluate(module, llama_target, samples, config)
    assert set(beams) == {5} and len(beams) == roots
