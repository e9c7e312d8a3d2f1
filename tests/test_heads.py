"""Medusa and Hydra heads on a tiny model: static tree construction, a CI-sized training run (loss falls,
checkpoint round-trips, resume), lossless drafting with the trained heads, and refusal of a checkpoint
trained for another target."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import build_tiny_model, distil_random_prompts, make_target, plain_greedy
from specbench.drafters.hydra import HydraDrafter
from specbench.drafters.medusa import MedusaDrafter
from specbench.drafters.static_tree import StaticTree, decode_walk_tau
from specbench.drafters.training.distill import iter_samples
from specbench.drafters.training.heads import HeadTrainConfig, position_dataset, remeasure, train_heads
from specbench.errors import SpecbenchError
from specbench.harness.autobudget.replay import TrajectoryTarget
from specbench.harness.autobudget.trajectories import Trajectory
from specbench.harness.loop import generate

DRAFTERS = {"medusa": MedusaDrafter, "hydra": HydraDrafter}


def test_static_tree_from_accuracies_is_greedy_and_valid():
    accuracy = [[0.6, 0.2, 0.1], [0.5, 0.2, 0.1], [0.4, 0.1, 0.05]]
    tree = StaticTree.from_accuracies(accuracy, budget=6)
    # values: (0)=.6 (0,0)=.3 (1)=.2 (0,0,0)=.12 (0,1)=.12 -> ties broken by path order
    assert tree.paths == ((), (0,), (0, 0), (1,), (0, 0, 0), (0, 1))
    assert tree.parents == (-1, 0, 1, 0, 2, 1)
    assert tree.depths == [0, 1, 2, 1, 3, 2] and tree.ranks == [0, 0, 0, 1, 0, 1]
    assert tree.parents_by_depth == [[0], [1], [2]]
    assert tree.expected_accepted(accuracy) == pytest.approx(1 + 0.6 + 0.3 + 0.2 + 0.12 + 0.12)
    assert len(StaticTree.from_accuracies(accuracy, budget=1)) == 1
    assert len(StaticTree.from_accuracies(accuracy, budget=100)) == 1 + 3 + 9 + 27
    draft = tree.draft_tree(7, torch.tensor([1, 2, 3, 4, 5]))
    draft.validate(7, 6)
    assert draft.depths() == tree.depths


def test_decode_walk_tau_steps_over_what_each_position_accepts():
    tree = [(), (0,), (0, 0), (1,)]
    # sample 1: position 0 accepts (0, 0) + bonus -> 3; position 3 accepts (1,) + bonus, the answer's end
    # sample 2: a miss at depth 1 gives the bonus alone; the last position's chain is cut by the answer's end
    sequences = [[[0, 0, 1], [9, 9, 9], [9, 9, 9], [1, 0, -1], [0, -1, -1]], [[-1, 0, 0], [0, 0, 0]]]
    assert decode_walk_tau(tree, sequences) == pytest.approx((3 + 2 + 1 + 1) / 4)
    assert decode_walk_tau([()], sequences) == 1.0  # root only: one token per step


def test_decode_walk_tau_is_a_step_mean_not_a_position_mean():
    """Easy stretches are skipped over, so the walk weights hard positions more than the position mean."""
    chain = [(), (0,), (0, 0), (0, 0, 0)]
    easy, hard = [0, 0, 0], [-1, -1, -1]
    sequence = [easy] * 8 + [hard] * 8  # position mean 2.5 tokens; the walk: 2 steps of 4, 8 steps of 1
    assert decode_walk_tau(chain, [sequence]) == pytest.approx(16 / 10)


@pytest.fixture(scope="module")
def cache(llama_target, tmp_path_factory):
    return distil_random_prompts(llama_target, tmp_path_factory.mktemp("distill"), seed=0)


def test_position_dataset_windows(cache):
    hidden, windows = position_dataset(cache, "train", lookahead=3)
    assert hidden.shape[0] == windows.shape[0] == 20 * 24  # 24 response tokens each, no EOS in the tiny model
    assert windows.shape[1] == 4 and (windows[:, 0] >= 0).all()
    assert (windows[-1, 1:] == -100).all()  # the last position of a sample has nothing after its root


@pytest.mark.parametrize("method", ["medusa", "hydra"])
def test_training_lowers_loss_and_round_trips(method, llama_target, cache, tmp_path):
    config = HeadTrainConfig(method=method, cache=str(cache), out=str(tmp_path / method), num_heads=3, epochs=2,
                             lr=3e-3, batch_size=32, warmup_steps=2, max_rank=4)
    recipe = train_heads(config, llama_target, progress=False)
    first, last = recipe["history"][0]["first_batch_loss"], recipe["history"][-1]["train_loss_per_head"]
    assert sum(last) < sum(first)
    saved = json.loads((tmp_path / f"{method}.json").read_text())
    assert saved["metrics"]["heldout_topk_accuracy"] == recipe["metrics"]["heldout_topk_accuracy"]
    assert len(saved["metrics"]["heldout_top1"]) == 3 and saved["parameters"] > 0
    # resume: epoch checkpoints exist; a rerun picks up after the last one and gives the same weights
    assert (tmp_path / f"{method}.epoch2.pt").exists()
    again = train_heads(config, llama_target, progress=False)
    assert again["metrics"] == recipe["metrics"]

    drafter = DRAFTERS[method](checkpoint=str(tmp_path / method), tree="static")
    dynamic = DRAFTERS[method](checkpoint=str(tmp_path / method), top_k=3)
    assert dynamic.tree == "dynamic"  # the default for specbench's own checkpoints
    for prompt in ([5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4]):
        for budget in (1, 4, 12):
            for heads in (drafter, dynamic):
                result = generate(llama_target, heads, prompt, 20, budget)
                assert result.output_ids == plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)
                assert max(step.nodes for step in result.steps) <= budget
    # the dynamic tree with one child per node is the heads' greedy chain: the static chain tree's proposals
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps([[0], [0, 0], [0, 0, 0]]))
    greedy_chain = DRAFTERS[method](checkpoint=str(tmp_path / method), choices=str(chain))
    assert greedy_chain.tree == "static"  # rank paths given: the static tree
    for heads in (dynamic, greedy_chain):
        heads.reset(llama_target.handle)
    assert dynamic.identity().endswith(":tree:dynamic:top_k:3") and greedy_chain.identity().endswith(":tree:static")
    one_child = DRAFTERS[method](checkpoint=str(tmp_path / method), top_k=1)
    assert [s.accepted for s in generate(llama_target, one_child, [5, 17, 42, 8], 20, 4).steps] == \
        [s.accepted for s in generate(llama_target, greedy_chain, [5, 17, 42, 8], 20, 4).steps]
    assert drafter.num_parameters() == saved["parameters"]

    # the recorded decode-walk tau is what a greedy replay of the held-out responses accepts
    walk = saved["metrics"]["heldout_walk_tau"]
    assert set(walk) == {"2", "4", "8", "16", "32"} and all(1.0 <= walk[b] <= 1 + int(b) for b in walk)
    held = list(iter_samples(cache, "heldout"))
    replayed = [s.accepted for sample in held for s in generate(
        TrajectoryTarget(llama_target, Trajectory(sample.input_ids[: sample.prompt_len],
                                                  sample.input_ids[sample.prompt_len:], sample.hidden.float())),
        drafter, sample.input_ids[: sample.prompt_len].tolist(), len(sample.input_ids) - sample.prompt_len, 8).steps]
    assert sum(replayed) / len(replayed) == pytest.approx(walk["8"])
    # re-measuring adds only what a recipe lacks, and says so
    del saved["metrics"]["heldout_walk_tau"]
    (tmp_path / f"{method}.json").write_text(json.dumps(saved))
    before = DRAFTERS[method](checkpoint=str(tmp_path / method))
    before.reset(llama_target.handle)
    assert remeasure(tmp_path / method, cache, llama_target) == recipe["metrics"]
    again = json.loads((tmp_path / f"{method}.json").read_text())
    assert again["metrics"] == recipe["metrics"] and again["metrics_remeasured"]["added"] == ["heldout_walk_tau"]
    after = DRAFTERS[method](checkpoint=str(tmp_path / method))
    after.reset(llama_target.handle)
    assert after.identity() != before.identity()  # the recipe's metrics build the tree, so they are identity

    # a draft vocabulary cut to the most frequent tokens stays lossless; the whole vocabulary drafts as before
    for size in (5, 40):
        cut = DRAFTERS[method](checkpoint=str(tmp_path / method), draft_vocab=size)
        result = generate(llama_target, cut, [5, 17, 42, 8], 20, 12)
        assert result.output_ids == plain_greedy(llama_target.model, [5, 17, 42, 8], 20, llama_target.eos_ids)
    whole = DRAFTERS[method](checkpoint=str(tmp_path / method), draft_vocab=llama_target.config.vocab_size, tree="static")
    assert [s.accepted for s in generate(llama_target, whole, [5, 17, 42, 8], 20, 12).steps] == \
        [s.accepted for s in generate(llama_target, drafter, [5, 17, 42, 8], 20, 12).steps]

    other = make_target(build_tiny_model("qwen2"))
    object.__setattr__(other.handle, "sha256", "f" * 64)
    with pytest.raises(SpecbenchError, match="trained for target"):
        DRAFTERS[method](checkpoint=str(tmp_path / method)).reset(other.handle)


@pytest.mark.parametrize("options, problem", [({"tree": "bushy"}, "tree must be one of static, dynamic"),
                                              ({"tree": "dynamic", "choices": "mc_sim_7b_63"}, "cannot go with tree=dynamic"),
                                              ({"tree": "dynamic", "top_k": 0}, "top_k must be a positive integer")])
@pytest.mark.parametrize("method", ["medusa", "hydra"])
def test_bad_tree_options_are_refused(method, options, problem):
    with pytest.raises(SpecbenchError, match=problem):
        DRAFTERS[method](**options)


def test_teacher_loss_targets_the_targets_distribution(llama_target, cache):
    """Hydra++'s teacher loss: head k on row r is scored against lm_head(hidden[r + 1 + k]); with the
    student's logits set to the teacher's, the loss is the teacher's entropy (its minimum)."""
    from specbench.drafters.training.heads import IGNORE, teacher_loss

    hidden, windows = position_dataset(cache, "train", lookahead=2)
    index = torch.tensor([0, 22, 23])  # rows 22, 23 end the first sample: one and zero tokens after the root
    labels = windows[index, 1:3].T  # [2, 3]
    assert (labels == IGNORE).tolist() == [[False, False, True], [False, True, True]]
    with torch.no_grad():
        teacher = torch.stack([llama_target.lm_head(hidden[(index + 1 + k).clamp(max=len(hidden) - 1)].float())
                               for k in range(2)])
        loss = teacher_loss(teacher, labels, hidden, index, llama_target, [0, 1])
        probs = teacher.softmax(-1)
        entropy = -(probs * probs.log()).sum(-1)  # [2, 3]
        valid = labels != IGNORE
        expected = (entropy * valid).sum(1) / valid.sum(1)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    shifted = teacher_loss(teacher.roll(1, dims=-1), labels, hidden, index, llama_target, [0, 1])
    assert (shifted > loss).all()


def test_hydra_with_teacher_loss_trains_and_drafts_losslessly(llama_target, cache, tmp_path):
    config = HeadTrainConfig(method="hydra", cache=str(cache), out=str(tmp_path / "hydra"), num_heads=3, epochs=2,
                             lr=3e-3, batch_size=32, warmup_steps=2, max_rank=4, loss="teacher")
    recipe = train_heads(config, llama_target, progress=False)
    assert sum(recipe["history"][-1]["train_loss_per_head"]) < sum(recipe["history"][0]["first_batch_loss"])
    assert recipe["hyperparameters"]["loss"] == "teacher"
    drafter = HydraDrafter(checkpoint=str(tmp_path / "hydra"))
    for prompt in ([5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4]):
        result = generate(llama_target, drafter, prompt, max_new_tokens=20, budget=8)
        assert result.output_ids == plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)


def test_prefix_cache_equals_the_sequence_forward():
    from specbench.drafters.prefix_attention import PrefixAttention, PrefixCache

    torch.manual_seed(0)
    layer = PrefixAttention(32, 4)
    for p in layer.parameters():  # leave the identity initialisation so attention matters
        torch.nn.init.normal_(p, std=0.2)
    hidden = torch.randn(10, 32)
    with torch.no_grad():
        full = layer.forward_sequence(hidden)  # [10, H]
        cache = PrefixCache()
        for start, stop in [(0, 4), (4, 5), (5, 10)]:
            torch.testing.assert_close(cache.extend(layer, start, hidden[start:stop]), full[stop - 1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(full, hidden)


def test_hydra_with_prefix_attention_trains_and_drafts_losslessly(llama_target, cache, tmp_path):
    config = HeadTrainConfig(method="hydra", cache=str(cache), out=str(tmp_path / "hydra"), num_heads=3, epochs=3,
                             lr=1e-2, batch_size=128, warmup_steps=2, max_rank=4, prefix_heads=4)
    recipe = train_heads(config, llama_target, progress=False)
    assert sum(recipe["history"][-1]["train_loss_per_head"]) < sum(recipe["history"][0]["first_batch_loss"])
    # the last position has no label
    assert recipe["data"]["train_positions"] == 20 * 24 and recipe["metrics"]["heldout_positions"] == 4 * 23
    drafter = HydraDrafter(checkpoint=str(tmp_path / "hydra"))
    for prompt in ([5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4]):
        for budget in (1, 8):
            result = generate(llama_target, drafter, prompt, max_new_tokens=20, budget=budget)
            assert result.output_ids == plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)
    assert drafter.module.prefix is not None
    with pytest.raises(SpecbenchError, match="hydra option"):
        train_heads(HeadTrainConfig(method="medusa", cache=str(cache), out=str(tmp_path / "m"), prefix_heads=2), llama_target)


def test_draft_vocab_ranks_tokens_by_count_and_scores_only_those_rows(llama_target, cache, tmp_path):
    from safetensors.torch import load_file, save_file

    from specbench.drafters.draft_vocab import RANKING_KEY, DraftVocab, token_ranking
    from specbench.drafters.training.distill import iter_samples

    vocab = llama_target.config.vocab_size
    ranking = token_ranking(cache, vocab)
    counts = torch.zeros(vocab, dtype=torch.long)
    for sample in iter_samples(cache, "train"):
        for token in sample.input_ids.tolist():
            counts[token] += 1
    assert sorted(ranking.tolist()) == list(range(vocab))
    ranked = counts[ranking.long()].tolist()
    assert ranked == sorted(ranked, reverse=True)  # most frequent first

    cut = DraftVocab(llama_target.lm_head, ranking, 10)
    features = torch.randn(3, llama_target.config.hidden_size)
    ids = cut.token_ids(torch.arange(10))
    assert set(ids.tolist()) == set(ranking[:10].tolist())
    with torch.no_grad():
        torch.testing.assert_close(cut.logits(features), llama_target.lm_head(features)[:, ids])
    assert DraftVocab(llama_target.lm_head, None, 0).size == vocab

    # a checkpoint without a ranking (trained before the option existed) refuses a cut, with a clear message
    train_heads(HeadTrainConfig(method="medusa", cache=str(cache), out=str(tmp_path / "m"), num_heads=2, epochs=1,
                                batch_size=64, warmup_steps=1), llama_target, progress=False)
    weights = tmp_path / "m.safetensors"
    state = load_file(str(weights))
    assert torch.equal(state.pop(RANKING_KEY), ranking)
    save_file(state, str(weights))
    MedusaDrafter(checkpoint=str(tmp_path / "m")).reset(llama_target.handle)  # the full vocabulary still works
    with pytest.raises(SpecbenchError, match="draft_vocab=8: this checkpoint stores no vocabulary ranking"):
        MedusaDrafter(checkpoint=str(tmp_path / "m"), draft_vocab=8).reset(llama_target.handle)


def test_label_indices_map_into_the_cut_and_ignore_the_rest(llama_target):
    from specbench.drafters.draft_vocab import DraftVocab
    from specbench.drafters.training.heads import IGNORE

    vocab_size = llama_target.config.vocab_size
    ranking = torch.arange(vocab_size - 1, -1, -1, dtype=torch.int32)  # highest ids most frequent
    vocab = DraftVocab(llama_target.lm_head, ranking, 4)  # keeps ids V-4 .. V-1
    labels = torch.tensor([[vocab_size - 1, 3, IGNORE], [vocab_size - 4, vocab_size - 2, 0]])
    mapped = vocab.label_indices(labels, IGNORE)
    assert mapped.tolist() == [[3, IGNORE, IGNORE], [0, 2, IGNORE]]
    assert (vocab.token_ids(mapped.clamp(min=0))[mapped >= 0] == labels[mapped >= 0]).all()
    features = torch.randn(2, llama_target.config.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(vocab.logits(features), llama_target.lm_head(features)[:, vocab.ids])


def test_context_columns_score_the_sequence_tokens_the_cut_lacks(llama_target):
    """follow_context adds each token of the sequence outside the cut once, as a column scored with the
    target's row; token_ids maps those columns back; forget_context drops them; the whole vocabulary and
    a head's own projection are left alone."""
    from torch import nn

    from specbench.drafters.draft_vocab import DraftVocab

    vocab_size, hidden = llama_target.config.vocab_size, llama_target.config.hidden_size
    ranking = torch.arange(vocab_size - 1, -1, -1, dtype=torch.int32)  # highest ids most frequent
    vocab = DraftVocab(llama_target.lm_head, ranking, 4)  # keeps ids V-4 .. V-1
    features = torch.randn(2, hidden)
    vocab.follow_context(torch.tensor([9, vocab_size - 1, 3, 9]))
    vocab.follow_context(torch.tensor([3, 11]))
    assert vocab.columns.tolist() == list(range(vocab_size - 4, vocab_size)) + [3, 9, 11]
    assert vocab.token_ids(torch.tensor([[4, 6], [0, 5]])).tolist() == [[3, 11], [vocab_size - 4, 9]]
    with torch.no_grad():
        torch.testing.assert_close(vocab.logits(features), llama_target.lm_head(features)[:, vocab.columns])
    assert vocab.size == 4  # the cut's own rows: what training and held-out scores count
    vocab.forget_context()
    assert vocab.columns.tolist() == list(range(vocab_size - 4, vocab_size)) and vocab.logits(features).shape == (2, 4)

    whole = DraftVocab(llama_target.lm_head, ranking, 0)
    whole.follow_context(torch.tensor([3, 9]))
    assert whole.columns is None and whole.logits(features).shape == (2, vocab_size)

    own = DraftVocab.of_projection(nn.Linear(hidden, 4, bias=False), ranking, vocab_size)  # a head's own rows
    own.follow_context(torch.tensor([3]))
    assert own.logits(features).shape == (2, 4) and own.columns.tolist() == list(range(vocab_size - 4, vocab_size))


@pytest.mark.parametrize("method", ["medusa", "hydra"])
def test_drafters_follow_the_context_and_stay_exact(method, llama_target, cache, tmp_path):
    """With a cut, the drafter's vocabulary gains the prompt's and answer's tokens outside it (not with
    context_vocab=false), per sequence; either way the output is plain greedy decoding, and the option is
    part of the drafter's identity (it changes proposals)."""
    train_heads(HeadTrainConfig(method=method, cache=str(cache), out=str(tmp_path / method), num_heads=2, epochs=1,
                                batch_size=64, warmup_steps=1), llama_target, progress=False)
    prompt = [5, 17, 42, 8]
    greedy = plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)
    identities = []
    for context_vocab in (True, "false"):
        drafter = DRAFTERS[method](checkpoint=str(tmp_path / method), draft_vocab=5, context_vocab=context_vocab)
        result = generate(llama_target, drafter, prompt, 20, 8)
        assert result.output_ids == greedy
        cut = set(drafter.vocab.ids.tolist())
        outside = set(drafter.vocab.columns.tolist()) - cut
        if context_vocab is True:  # every prompt token outside the cut, and answer tokens only
            assert set(prompt) - cut
            assert set(prompt) - cut <= outside <= set(prompt + result.output_ids) - cut
            assert len(drafter.vocab.columns) == len(set(drafter.vocab.columns.tolist()))  # each token once
        else:
            assert not outside
        identities.append(drafter.identity())
        drafter.reset(llama_target.handle)  # a new sequence forgets the last one's words
        assert drafter.vocab.columns.tolist() == drafter.vocab.ids.tolist()
    assert identities[0] != identities[1]


@pytest.mark.parametrize("train_vocab, dtype", [(24, "float32"), (0, "bfloat16")])
def test_training_over_a_cut_or_in_bf16_autocast(train_vocab, dtype, llama_target, cache, tmp_path):
    """A train vocabulary scores only the cut (labels outside are ignored); bf16 autocast keeps float32
    master weights. Both train (loss falls), record their settings and draft losslessly."""
    config = HeadTrainConfig(method="hydra", cache=str(cache), out=str(tmp_path / "h"), num_heads=2, epochs=2,
                             lr=3e-3, batch_size=32, warmup_steps=2, max_rank=4, train_vocab=train_vocab, dtype=dtype)
    recipe = train_heads(config, llama_target, progress=False)
    assert sum(recipe["history"][-1]["train_loss_per_head"]) < sum(recipe["history"][0]["first_batch_loss"])
    assert recipe["hyperparameters"]["train_vocab"] == train_vocab and recipe["hyperparameters"]["dtype"] == dtype
    state = torch.load(tmp_path / "h.epoch2.pt", weights_only=False)["module"]
    assert all(v.dtype == torch.float32 for v in state.values())
    drafter = DRAFTERS["hydra"](checkpoint=str(tmp_path / "h"), draft_vocab=train_vocab or None)
    result = generate(llama_target, drafter, [5, 17, 42, 8], 20, 8)
    assert result.output_ids == plain_greedy(llama_target.model, [5, 17, 42, 8], 20, llama_target.eos_ids)


def test_teacher_loss_over_a_train_vocabulary_is_the_renormalised_teacher(llama_target, cache, tmp_path):
    """Over a cut, the soft labels are the target's distribution restricted to the cut and renormalised:
    with the student's logits equal to the target's on the cut, the loss is that distribution's entropy."""
    from specbench.drafters.draft_vocab import DraftVocab, token_ranking
    from specbench.drafters.training.heads import teacher_loss

    vocab = DraftVocab(llama_target.lm_head, token_ranking(cache, llama_target.config.vocab_size), 16)
    hidden, windows = position_dataset(cache, "train", lookahead=1)
    index = torch.tensor([0, 1, 2])
    labels = windows[index, 1:2].T  # [1, 3]
    with torch.no_grad():
        student = llama_target.lm_head(hidden[index + 1].float())[:, vocab.ids][None]  # [1, 3, 16]
        loss = teacher_loss(student, labels, hidden, index, llama_target, [0], vocab)
        probs = student[0].softmax(-1)
        expected = -(probs * probs.log()).sum(-1).mean()
    torch.testing.assert_close(loss[0], expected, rtol=1e-4, atol=1e-5)
    config = HeadTrainConfig(method="hydra", cache=str(cache), out=str(tmp_path / "h"), num_heads=2, epochs=2, lr=3e-3,
                             batch_size=32, warmup_steps=2, loss="teacher", train_vocab=24)
    recipe = train_heads(config, llama_target, progress=False)
    assert sum(recipe["history"][-1]["train_loss_per_head"]) < sum(recipe["history"][0]["first_batch_loss"])


def test_a_trained_hydra_extended_by_a_frozen_start_keeps_its_heads_and_trains_the_new_one(llama_target, cache, tmp_path):
    """``init_from`` + ``freeze_loaded``: the checkpoint's heads, prefix layer and draft vocabulary are kept
    bit for bit, only the added head learns (its loss falls), the recipe says where it started, and the
    deeper drafter stays lossless."""
    base = HeadTrainConfig(method="hydra", cache=str(cache), out=str(tmp_path / "h2"), num_heads=2, epochs=2,
                           lr=1e-2, batch_size=128, warmup_steps=2, max_rank=4, prefix_heads=4, train_vocab=24)
    first = train_heads(base, llama_target, progress=False)
    extended = HeadTrainConfig(**(vars(base) | {"out": str(tmp_path / "h3"), "num_heads": 3, "init_from": base.out,
                                                "freeze_loaded": True, "epochs": 3}))
    recipe = train_heads(extended, llama_target, progress=False)
    before = HydraDrafter(checkpoint=base.out, draft_vocab=24)
    after = HydraDrafter(checkpoint=extended.out, draft_vocab=24)
    before.reset(llama_target.handle)
    after.reset(llama_target.handle)
    old, new = before.module.state_dict(), after.module.state_dict()
    assert all(torch.equal(old[k], new[k]) for k in old)  # every loaded parameter unchanged
    assert new["heads.2.mix.weight"].abs().sum() > 0  # the new head moved from its zero start
    assert torch.equal(before.vocab.ids, after.vocab.ids)  # the draft vocabulary is the checkpoint's
    assert recipe["metrics"]["heldout_top1"][:2] == pytest.approx(first["metrics"]["heldout_top1"])
    assert recipe["hyperparameters"]["trained_heads"] == [2] and len(recipe["history"][0]["train_loss_per_head"]) == 1
    assert recipe["history"][-1]["train_loss_per_head"][0] < recipe["history"][0]["train_loss_per_head"][0]
    start = recipe["hyperparameters"]["initialised_from"]
    assert start["heads"] == 2 and start["frozen"] is True and start["checkpoint"] == "h2"
    assert len(after.module.heads) == 3
    prompt = [5, 17, 42, 8]
    result = generate(llama_target, after, prompt, max_new_tokens=20, budget=8)
    assert result.output_ids == plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)


@pytest.mark.parametrize("change, problem", [({"init_from": None}, "--freeze-loaded needs --init-from"),
                                             ({"num_heads": 2}, "already has 2 heads"),
                                             ({"method": "medusa", "prefix_heads": 0}, "a hydra checkpoint, not medusa"),
                                             ({"prefix_heads": 2}, "its --prefix-heads is 4, not 2"),
                                             ({"num_layers": 2}, "its --num-layers is 1, not 2")])
def test_warm_starts_that_cannot_work_are_refused(change, problem, llama_target, cache, tmp_path):
    base = HeadTrainConfig(method="hydra", cache=str(cache), out=str(tmp_path / "h2"), num_heads=2, epochs=1,
                           batch_size=128, warmup_steps=1, prefix_heads=4)
    train_heads(base, llama_target, progress=False)
    bad = HeadTrainConfig(**(vars(base) | {"out": str(tmp_path / "h3"), "num_heads": 3, "init_from": base.out,
                                           "freeze_loaded": True} | change))
    with pytest.raises(SpecbenchError, match=problem):
        train_heads(bad, llama_target, progress=False)


@pytest.mark.parametrize("method", ["medusa", "hydra"])
def test_own_output_projections_start_as_the_shared_heads_and_then_learn(method, llama_target, cache, tmp_path):
    """``own_lm_heads``: warm-started from a shared-projection checkpoint with a zero learning rate, the
    heads with their own projections (copies of the target's rows over the train vocabulary) score exactly
    as the checkpoint did, held out and at inference, so rows and token ids line up; trained, the
    projections move, the loss falls, the recipe rebuilds the module, and drafting stays lossless."""
    options = {"prefix_heads": 4} if method == "hydra" else {}
    shared = HeadTrainConfig(method=method, cache=str(cache), out=str(tmp_path / "shared"), num_heads=2, epochs=2,
                             lr=1e-2, batch_size=128, warmup_steps=2, max_rank=4, train_vocab=24, **options)
    first = train_heads(shared, llama_target, progress=False)
    copied = HeadTrainConfig(**(vars(shared) | {"out": str(tmp_path / "copied"), "init_from": shared.out, "lr": 0.0,
                                                "epochs": 1, "own_lm_heads": True}))
    recipe = train_heads(copied, llama_target, progress=False)
    assert recipe["hyperparameters"]["own_vocab"] == 24
    for own_row, shared_row in zip(recipe["metrics"]["heldout_topk_accuracy"], first["metrics"]["heldout_topk_accuracy"]):
        assert own_row == pytest.approx(shared_row)
    before, after = DRAFTERS[method](checkpoint=shared.out, draft_vocab=24), DRAFTERS[method](checkpoint=copied.out)
    before.reset(llama_target.handle)
    after.reset(llama_target.handle)
    assert after.head_vocabs is not None and len(after.head_vocabs) == 2
    features = torch.randn(3, llama_target.config.hidden_size)
    for head in range(2):
        shared_top, own_top = before.top_log_probs(features, 4), after.top_log_probs(features, 4, head=head)
        assert torch.equal(shared_top[1], own_top[1]) and torch.allclose(shared_top[0], own_top[0], atol=1e-3)  # float16 weights

    trained = HeadTrainConfig(**(vars(copied) | {"out": str(tmp_path / "own"), "lr": 1e-2, "epochs": 2}))
    recipe = train_heads(trained, llama_target, progress=False)
    drafter = DRAFTERS[method](checkpoint=trained.out)
    drafter.reset(llama_target.handle)
    rows = after.module.lm_heads[0].weight
    assert not torch.allclose(drafter.module.lm_heads[0].weight, rows)  # the projection learned
    assert not torch.allclose(drafter.module.lm_heads[0].weight, drafter.module.lm_heads[1].weight)  # each its own
    assert recipe["history"][-1]["train_loss_per_head"][0] < recipe["history"][0]["first_batch_loss"][0]
    prompt = [5, 17, 42, 8]
    result = generate(llama_target, drafter, prompt, max_new_tokens=20, budget=8)
    assert result.output_ids == plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)
    # own projections take no context columns (they have no rows for them): the same proposals as without
    assert all(vocab.columns.tolist() == vocab.ids.tolist() for vocab in drafter.head_vocabs)
    plain = DRAFTERS[method](checkpoint=trained.out, context_vocab=False)
    assert [s.accepted for s in generate(llama_target, plain, prompt, 20, 8).steps] == [s.accepted for s in result.steps]
    assert plain.identity() == drafter.identity()


def test_own_output_projections_must_match_the_warm_start(llama_target, cache, tmp_path):
    """A checkpoint with its own projections cannot start shared-projection heads (and the message says which option)."""
    own = HeadTrainConfig(method="medusa", cache=str(cache), out=str(tmp_path / "own"), num_heads=2, epochs=1,
                          batch_size=128, warmup_steps=1, train_vocab=24, own_lm_heads=True)
    train_heads(own, llama_target, progress=False)
    bad = HeadTrainConfig(**(vars(own) | {"out": str(tmp_path / "bad"), "init_from": own.out, "own_lm_heads": False}))
    with pytest.raises(SpecbenchError, match="--own-lm-heads"):
        train_heads(bad, llama_target, progress=False)
