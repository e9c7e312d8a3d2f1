"""The eagle drafter: EAGLE-2's dynamic tree as data (budget, parents before children, best scores kept),
the draft layer's cache against a whole-sequence forward, lossless drafting on tiny models at every budget,
and a CI-sized training run (loss falls, checkpoint round-trips, resume)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import distil_random_prompts, plain_greedy
from specbench.drafter import DraftContext
from specbench.drafters.dynamic_tree import Candidates
from specbench.drafters.eagle import EagleDrafter, EagleModule
from specbench.drafters.prefix_attention import PrefixCache
from specbench.drafters.training.eagle import EagleTrainConfig, predict_features, train_eagle
from specbench.harness.loop import generate


def test_tree_keeps_the_best_scores_with_parents_before_children():
    candidates = Candidates()
    first = candidates.add(torch.tensor([10, 11, 12]), torch.tensor([-0.1, -1.0, -2.0]), [-1, -1, -1])
    children = candidates.add(torch.tensor([20, 21, 22]), torch.tensor([-0.3, -0.5, -3.0]), [first[0], first[0], first[1]])
    candidates.add(torch.tensor([30]), torch.tensor([-0.6]), [children[1]])
    tree = candidates.tree(root=7, budget=5)  # the 4 best: 10 (-0.1), 20 (-0.3), 21 (-0.5), 30 (-0.6)
    assert tree.tokens.tolist() == [7, 10, 20, 21, 30]
    assert tree.parents.tolist() == [-1, 0, 1, 1, 3]
    assert candidates.tree(7, 1).tokens.tolist() == [7]
    assert len(candidates.tree(7, 100).tokens) == 1 + len(candidates)
    assert candidates.best(children, 2) == [children[0], children[1]]
    assert candidates.ancestors(children[1] + 2) == [first[0], children[1], children[1] + 2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.floats(0.0, 5.0)), min_size=1, max_size=40), st.integers(1, 50))
def test_any_candidate_set_gives_a_valid_tree_of_the_budget(draws, budget):
    """Parents are drawn among earlier candidates; a child's score is its parent's minus a cost >= 0 (as with
    log-probabilities), ties included (cost 0)."""
    candidates = Candidates()
    for i, (pick, cost) in enumerate(draws):
        parent = pick % (i + 1) - 1  # -1 (the root) or an earlier candidate
        base = 0.0 if parent < 0 else candidates.scores[parent]
        candidates.add(torch.tensor([i]), torch.tensor([base - cost], dtype=torch.float64), [parent])
    tree = candidates.tree(root=999, budget=budget)
    tree.validate(999, budget)
    assert len(tree.tokens) == min(budget, 1 + len(draws))
    parents = tree.parents.tolist()
    assert all(p < i for i, p in enumerate(parents[1:], start=1))  # parents before children
    kept = sorted(candidates.scores[t] for t in tree.tokens.tolist()[1:])
    left_out = [candidates.scores[i] for i in range(len(draws)) if i not in tree.tokens.tolist()[1:]]
    assert not kept or not left_out or max(left_out) <= min(kept)  # the best scores are the ones kept


def random_eagle(target, seed: int = 0) -> EagleModule:
    torch.manual_seed(seed)
    module = EagleModule(target.config.hidden_size, target.config.num_attention_heads)
    for parameter in module.parameters():  # leave the identity initialisation: attention must matter
        torch.nn.init.normal_(parameter, std=0.2)
    return module.eval()


def test_cached_drafting_equals_the_whole_sequence_forward(llama_target):
    module = random_eagle(llama_target)
    features = torch.randn(9, llama_target.config.hidden_size)
    next_embeddings = torch.randn(9, llama_target.config.hidden_size)
    with torch.no_grad():
        full = module.forward_sequence(features, next_embeddings)  # [9, H]
        cache = PrefixCache()
        for start, stop in [(0, 5), (5, 6), (6, 9)]:
            x = module.fuse(next_embeddings[start:stop], features[start:stop])
            torch.testing.assert_close(cache.extend(module.layer, start, x), full[stop - 1], rtol=1e-5, atol=1e-5)
    assert not hasattr(module.layer.norm, "weight")  # EAGLE's layer has no input norm


@pytest.fixture(scope="module")
def trained(llama_target, tmp_path_factory):
    folder = tmp_path_factory.mktemp("eagle")
    cache = distil_random_prompts(llama_target, folder / "cache", seed=2)
    config = EagleTrainConfig(cache=str(cache), out=str(folder / "eagle"), epochs=3, lr=5e-3, samples_per_step=2,
                              warmup_steps=2)
    return config, train_eagle(config, llama_target, progress=False)


def test_training_lowers_the_loss_resumes_and_records_metrics(llama_target, trained):
    config, recipe = trained
    history = recipe["history"]
    assert history[-1]["last_tenth_loss"] < history[0]["first_tenth_loss"]
    metrics = recipe["metrics"]
    assert 0 <= metrics["heldout_top1"] <= metrics["heldout_top5"] <= 1 and metrics["heldout_rows"] == 4 * 24
    assert recipe["parameters"] == sum(p.numel() for p in EagleModule(32, 4).parameters())
    assert train_eagle(config, llama_target, progress=False)["metrics"] == metrics  # resumed: the same weights
    drafter = EagleDrafter(checkpoint=config.out)
    drafter.reset(llama_target.handle)
    assert drafter.num_parameters() == recipe["parameters"]


@pytest.mark.parametrize("budget", [1, 2, 3, 8, 24])
def test_eagle_is_lossless_and_keeps_the_budget(llama_target, trained, budget):
    config, _ = trained
    drafter = EagleDrafter(checkpoint=config.out, top_k=4, depth=3)
    for prompt in ([5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4], [60, 12, 88, 31, 29, 60, 12, 88]):
        result = generate(llama_target, drafter, prompt, 24, budget)
        assert result.output_ids == plain_greedy(llama_target.model, prompt, 24, llama_target.eos_ids)
        assert max(step.nodes for step in result.steps) <= budget
        assert max(step.depth for step in result.steps) <= min(4, budget - 1)


def test_the_tree_follows_the_drafts_own_confidence(llama_target, trained):
    """The first level is the draft's top-k after the root; a deeper node's token is among its parent's
    top-k children, computed here from the module directly (teacher-forcing the parent's feature)."""
    config, _ = trained
    drafter = EagleDrafter(checkpoint=config.out, top_k=3, depth=2)
    drafter.reset(llama_target.handle)
    hidden = torch.randn(5, llama_target.config.hidden_size, generator=torch.Generator().manual_seed(1))
    tokens = torch.tensor([9, 8, 7, 6, 5, 11])
    ctx = DraftContext(tokens=tokens, root=11, hidden=hidden, target=llama_target.handle, budget=8,
                       span=lambda name: contextlib.nullcontext())
    tree = drafter.propose(ctx)
    embed = llama_target.handle.embed_tokens
    with torch.no_grad():
        predicted = drafter.module.forward_sequence(hidden, embed(tokens[1:]))  # [5, H]
        first = llama_target.lm_head(predicted[-1]).topk(3).indices.tolist()
    depth_one = [t for t, p in zip(tree.tokens.tolist(), tree.parents.tolist()) if p == 0]
    assert depth_one and set(depth_one) <= set(first)
    parents = tree.parents.tolist()
    for node, parent in enumerate(parents):
        if parent > 0 and parents[parent] == 0:  # depth 2: the parent's pair (f^ after root, parent token) one position on
            with torch.no_grad():
                seq = drafter.module.forward_sequence(torch.cat([hidden, predicted[-1:]]),
                                                      embed(torch.cat([tokens[1:], tree.tokens[parent : parent + 1]])))
                children = llama_target.lm_head(seq[-1]).topk(3).indices.tolist()
            assert int(tree.tokens[node]) in children


def test_predict_features_pairs_each_feature_with_the_next_token(llama_target, trained):
    from specbench.drafters.training.distill import iter_samples

    config, _ = trained
    sample = next(iter(iter_samples(config.cache, "train")))
    drafter = EagleDrafter(checkpoint=config.out)
    drafter.reset(llama_target.handle)
    with torch.no_grad():
        predicted = predict_features(drafter.module, llama_target, sample)  # [L-1, H]
        embed = llama_target.handle.embed_tokens
        direct = drafter.module.forward_sequence(sample.hidden[:-1].float(), embed(sample.input_ids[1:]))
    torch.testing.assert_close(predicted, direct)
    assert predicted.shape == (len(sample.input_ids) - 1, llama_target.config.hidden_size)
