"""eagle3 training (issue 44 item 2): the distillation cache's auxiliary states are what the drafter reads at
inference, the training-time test unrolls the layer on its own outputs with the tree's mask, training lowers
the loss, resumes, writes the learning curve, and the checkpoint drafts losslessly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import PROMPTS, distil_random_prompts, plain_greedy
from specbench.drafters.draft_vocab import token_ranking
from specbench.drafters.eagle3 import Eagle3Drafter
from specbench.drafters.speculators import default_layer_ids
from specbench.drafters.training.distill import iter_samples
from specbench.drafters.training.eagle3 import (
    Eagle3TrainConfig,
    column_mask,
    context_columns,
    draft_token_ids,
    train_eagle3,
    ttt_loss,
    unrolled_outputs,
)
from specbench.errors import SpecbenchError
from specbench.harness.loop import generate


@pytest.fixture(scope="module")
def trained(llama_target, tmp_path_factory):
    folder = tmp_path_factory.mktemp("eagle3-train")
    layer_ids = default_layer_ids(llama_target.config.num_hidden_layers)
    cache = distil_random_prompts(llama_target, folder / "cache", seed=3, aux_layers=layer_ids)
    config = Eagle3TrainConfig(cache=str(cache), out=str(folder / "eagle3"), epochs=3, lr=5e-3, samples_per_step=2,
                               warmup_steps=2, ttt_steps=3, draft_vocab=60)
    return config, train_eagle3(config, llama_target, progress=False)


def test_the_cache_holds_the_states_the_drafter_reads(llama_target, trained):
    """A sample's aux rows are the states entering the layers that eagle3's layer taps record on the same tokens."""
    config, _ = trained
    sample = next(iter(iter_samples(Path(config.cache), "train")))
    layer_ids = default_layer_ids(llama_target.config.num_hidden_layers)
    llama_target.handle.taps.request(layer_ids)
    with torch.no_grad():
        llama_target.decoder(input_ids=sample.input_ids[None])
    expected = llama_target.handle.taps.states(layer_ids)  # [L, 3H]
    assert sample.aux.shape == expected.shape == (len(sample.input_ids), 3 * llama_target.config.hidden_size)
    torch.testing.assert_close(sample.aux.float(), expected.float(), rtol=2e-3, atol=2e-3)  # float16 storage


def test_ttt_steps_feed_the_layers_own_output_back(llama_target, trained):
    """Step j at anchor t equals the drafter's own chain: the cache over the true context 0..t, then nodes fed
    the previous step's h (no fc), each attending to the context and its ancestors. Teacher forcing (k = 1
    semantics: every step from the target's features) gives other numbers, so this fails for it."""
    config, _ = trained
    drafter = Eagle3Drafter(checkpoint=config.out)
    drafter.reset(llama_target.handle)
    module = drafter.module
    sample = next(iter(iter_samples(Path(config.cache), "heldout")))
    levels, anchor = 3, sample.prompt_len + 2
    with torch.no_grad():
        outs = unrolled_outputs(module, llama_target, sample, levels)  # levels x [L-1, H]
        ids = sample.input_ids
        embed = llama_target.handle.embed_tokens
        layer = module.layer
        positions = torch.arange(anchor + 1)
        x, residual = layer.inputs(embed(ids[1 : anchor + 2]), module.fc(sample.aux[: anchor + 1].float()))
        keys, values = layer.keys_values(x, positions)
        h = layer.attend(x[-1:], residual[-1:], positions[-1:], keys, values, None)  # step 1 at the anchor
        torch.testing.assert_close(outs[0][anchor], h[0], rtol=1e-4, atol=1e-5)
        for step in range(2, levels + 1):
            x, residual = layer.inputs(embed(ids[anchor + step : anchor + step + 1]), h)  # its own h, no fc
            position = torch.tensor([anchor + step - 1])
            k, v = layer.keys_values(x, position)
            keys, values = torch.cat([keys, k]), torch.cat([values, v])
            h = layer.attend(x, residual, position, keys, values, None)
            torch.testing.assert_close(outs[step - 1][anchor], h[0], rtol=1e-4, atol=1e-5)
        forced, _ = layer.inputs(embed(ids[anchor + 2 : anchor + 3]), module.fc(sample.aux[anchor + 1 : anchor + 2].float()))
        assert not torch.allclose(forced, layer.inputs(embed(ids[anchor + 2 : anchor + 3]), outs[0][anchor : anchor + 1])[0])


def test_the_loss_weights_each_step_as_the_released_trainer(llama_target, trained):
    config, _ = trained
    module = Eagle3Drafter(checkpoint=config.out)
    module.reset(llama_target.handle)
    sample = next(iter(iter_samples(Path(config.cache), "train")))
    with torch.no_grad():
        total, per_step = ttt_loss(module.module, llama_target, sample, 4, 0.8)
        first, (only,) = ttt_loss(module.module, llama_target, sample, 1, 0.8)
    assert len(per_step) == 4 and per_step[0] == pytest.approx(only)
    assert total.item() == pytest.approx(sum(0.8 ** j * loss for j, loss in enumerate(per_step)), rel=1e-5)
    assert first.item() == pytest.approx(only)


def test_the_feature_loss_adds_each_steps_distance_to_the_targets_own_feature(llama_target, trained):
    config, _ = trained
    module = Eagle3Drafter(checkpoint=config.out)
    module.reset(llama_target.handle)
    sample = next(iter(iter_samples(Path(config.cache), "train")))
    start, length = sample.prompt_len - 1, len(sample.input_ids)
    with torch.no_grad():
        plain, kl = ttt_loss(module.module, llama_target, sample, 3, 0.5)
        total, kl_too = ttt_loss(module.module, llama_target, sample, 3, 0.5, feature_weight=2.0)
        outs = unrolled_outputs(module.module, llama_target, sample, 3, start)
        # step j's output at anchor t against the target's feature at t + j (what its lm_head scores there)
        distances = [torch.nn.functional.smooth_l1_loss(
            module.module.norm(h[: length - start - step]).float(),
            sample.hidden[start + step : length].float()) for step, h in enumerate(outs, start=1)]
    assert kl_too == kl  # the recorded per-step losses stay the KL divergences
    expected = plain.item() + 2.0 * sum(0.5 ** j * d.item() for j, d in enumerate(distances))
    assert total.item() == pytest.approx(expected, rel=1e-5)
    assert total.item() > plain.item() + 1e-3  # an untrained-to-match draft is far from the target's features
    with pytest.raises(SpecbenchError, match="--feature-weight must be 0 or more"):
        Eagle3TrainConfig(cache="c", out="o", feature_weight=-1.0).validate()


def test_context_columns_are_the_tokens_outside_the_draft_vocabulary_each_from_where_it_is_seen(llama_target, trained):
    """``context_vocab``'s columns: the sample's distinct tokens outside V' with their first positions; anchor t
    sees a column once its token occurred at or before t + 1 (x_{t+1} is the anchor's input token)."""
    config, _ = trained
    drafter = Eagle3Drafter(checkpoint=config.out)
    drafter.reset(llama_target.handle)
    module = drafter.module
    sample = next(iter(iter_samples(Path(config.cache), "train")))
    ids = sample.input_ids.tolist()
    extra, first = context_columns(module, sample, True)
    outside = [token for token in ids if not module.t2d[token]]
    assert extra.tolist() == sorted(set(outside)) and len(extra) > 1
    assert first.tolist() == [ids.index(token) for token in extra.tolist()]
    assert context_columns(module, sample, False)[0].numel() == 0
    mask = column_mask(60, first, torch.arange(len(ids) - 1))  # [L - 1, 60 + C]
    assert (mask[:, :60] == 0).all()
    for t in range(len(ids) - 1):
        assert [token for token, m in zip(extra.tolist(), mask[t, 60:].tolist()) if m == 0] == sorted(
            {token for token in ids[: t + 2] if not module.t2d[token]})


def test_the_context_loss_is_the_kl_over_each_anchors_own_columns(llama_target, trained):
    """ttt_loss with context columns at step 1, recomputed anchor by anchor: the draft head's V' rows plus the
    target's rows of the tokens the anchor has seen outside V', the teacher cut to the same columns, anchors
    whose target top token is among them. Without the columns the loss differs (the sample has such tokens)."""
    config, _ = trained
    drafter = Eagle3Drafter(checkpoint=config.out)
    drafter.reset(llama_target.handle)
    module = drafter.module
    sample = next(iter(iter_samples(Path(config.cache), "train")))
    ids, start = sample.input_ids.tolist(), sample.prompt_len - 1
    with torch.no_grad():
        (total, (loss,)), plain = ttt_loss(module, llama_target, sample, 1, 0.8, True), ttt_loss(
            module, llama_target, sample, 1, 0.8)
        h = unrolled_outputs(module, llama_target, sample, 1)[0]  # [L - 1, H]
        full = llama_target.lm_head(sample.hidden.float()).float()  # [L, V]
        expected = []
        for t in range(start, len(ids) - 1):
            seen = sorted({token for token in ids[: t + 2] if not module.t2d[token]})
            columns = torch.cat([module.token_ids(), torch.tensor(seen, dtype=torch.long)])
            normed = module.norm(h[t])
            logits = torch.cat([module.lm_head(normed), llama_target.lm_head.weight[seen].float() @ normed])
            teacher = full[t + 1, columns].softmax(-1)
            kl = (teacher * (teacher.log() - logits.log_softmax(-1))).sum()
            expected.append(kl if bool((columns == full[t + 1].argmax()).any()) else torch.tensor(0.0))
    assert loss == pytest.approx(torch.stack(expected).mean().item(), rel=1e-4, abs=1e-6)
    assert total.item() == pytest.approx(loss)
    assert plain[1][0] != pytest.approx(loss, rel=1e-4)


def test_a_checkpoint_trained_with_context_columns_drafts_with_them_by_default(llama_target, trained, tmp_path):
    """`--context-vocab` training is recorded in the recipe, and the drafter then scores the sequence's own tokens
    by default (an explicit option still wins); one trained without keeps them off. Output exact either way."""
    config, _ = trained
    context = Eagle3TrainConfig(cache=config.cache, out=str(tmp_path / "eagle3-context"), epochs=1, lr=5e-3,
                                samples_per_step=2, warmup_steps=2, ttt_steps=2, draft_vocab=60, context_vocab=True)
    recipe = train_eagle3(context, llama_target, progress=False)
    assert recipe["hyperparameters"]["context_vocab"] is True
    expected = plain_greedy(llama_target.model, PROMPTS[0], 16, llama_target.eos_ids)
    for checkpoint, option, follows in ((context.out, None, True), (context.out, "false", False),
                                        (config.out, None, False), (config.out, True, True)):
        drafter = Eagle3Drafter(checkpoint=checkpoint, top_k=4, depth=3, context_vocab=option)
        assert generate(llama_target, drafter, PROMPTS[0], 16, 8).output_ids == expected
        assert drafter.follows_context is follows and drafter.identity().endswith(":context") is follows


def test_training_lowers_the_loss_resumes_and_writes_the_learning_curve(llama_target, trained):
    config, recipe = trained
    history = recipe["history"]
    assert history[-1]["train_loss"] < 0.7 * history[0]["first_tenth_loss"]  # KL to the target, whole last epoch
    curve = json.loads(Path(f"{config.out}.curve.json").read_text())["curve"]
    assert [point["epoch"] for point in curve] == [0, 1, 2, 3]
    seen = [point["tokens_seen"] for point in curve]
    assert seen[0] == 0 and seen[1] > 0 and seen == [seen[1] * e for e in range(4)]
    for point in curve:
        chain = point["heldout_chain"]
        assert chain == sorted(chain, reverse=True) and point["heldout_chain_tau"] == pytest.approx(1 + sum(chain), abs=1e-3)
    assert curve[-1]["heldout_chain_tau"] > curve[0]["heldout_chain_tau"]  # it learned something held out
    assert recipe["metrics"]["curve"] == curve and len(recipe["metrics"]["heldout_step_loss"]) == 3
    assert train_eagle3(config, llama_target, progress=False)["metrics"] == recipe["metrics"]  # resumed: same weights


def test_the_draft_vocabulary_is_the_most_frequent_response_tokens(llama_target, trained):
    config, recipe = trained
    drafter = Eagle3Drafter(checkpoint=config.out)
    drafter.reset(llama_target.handle)
    ids = drafter.module.token_ids().cpu()
    assert len(ids) == 60 == recipe["hyperparameters"]["draft_vocab"] and torch.equal(ids, ids.sort().values)
    counts = torch.zeros(llama_target.config.vocab_size, dtype=torch.long)
    for sample in iter_samples(Path(config.cache), "train"):
        counts += torch.bincount(sample.input_ids[sample.prompt_len :], minlength=len(counts))
    assert counts[ids].min() >= counts[~drafter.module.t2d.cpu()].max()  # none left out is more frequent
    ranking = token_ranking(Path(config.cache), len(counts))
    assert torch.equal(draft_token_ids(Path(config.cache), ranking, 60), ids)  # ties: the cache's overall ranking
    many = draft_token_ids(Path(config.cache), ranking, 200)  # more than the target has: all of them
    assert torch.equal(many, torch.arange(len(counts)))


@pytest.mark.parametrize("budget", [1, 2, 8, 24])
def test_the_trained_checkpoint_drafts_losslessly(llama_target, trained, budget):
    config, _ = trained
    drafter = Eagle3Drafter(checkpoint=config.out, top_k=4, depth=3)
    for prompt in PROMPTS[:3]:
        result = generate(llama_target, drafter, prompt, 24, budget)
        assert result.output_ids == plain_greedy(llama_target.model, prompt, 24, llama_target.eos_ids)
        assert max(step.nodes for step in result.steps) <= budget


def test_a_cache_without_aux_states_and_bad_settings_are_refused(llama_target, trained, tmp_path):
    config, _ = trained
    with pytest.raises(SpecbenchError, match="--ttt-steps"):
        Eagle3TrainConfig(cache="c", out="o", ttt_steps=0).validate()
    with pytest.raises(SpecbenchError, match="--train-vocab"):
        Eagle3TrainConfig(cache="c", out="o", train_vocab=10).validate()
    plain = distil_random_prompts(llama_target, tmp_path / "plain", seed=3)
    with pytest.raises(SpecbenchError, match="--aux-layers"):
        train_eagle3(Eagle3TrainConfig(cache=str(plain), out=str(tmp_path / "x"), epochs=1), llama_target, progress=False)


def test_training_goes_on_from_a_checkpoint_with_its_vocabulary_and_curve(llama_target, trained, tmp_path):
    """``init_from``: the loaded module starts where the checkpoint ended (the new curve's first point is its
    last, tokens seen included), keeps its draft vocabulary whatever ``draft_vocab`` says, trains on (the
    curve goes on rising from there) and records where it came from; another method's checkpoint or a cache of
    other layers is refused with one line."""
    config, recipe = trained
    more = Eagle3TrainConfig(cache=config.cache, out=str(tmp_path / "more"), epochs=1, lr=2e-3, samples_per_step=2,
                             warmup_steps=2, ttt_steps=3, draft_vocab=30, init_from=config.out)
    again = train_eagle3(more, llama_target, progress=False)
    before, start, end = recipe["metrics"]["curve"][-1], again["metrics"]["curve"][0], again["metrics"]["curve"][-1]
    assert start["tokens_seen"] == before["tokens_seen"] and start["heldout_chain"] == before["heldout_chain"]
    assert end["tokens_seen"] == before["tokens_seen"] + before["tokens_seen"] // 3  # one more epoch of three
    assert again["hyperparameters"]["draft_vocab"] == 60 == recipe["hyperparameters"]["draft_vocab"]
    assert again["hyperparameters"]["initialised_from"]["checkpoint"] == Path(config.out).name
    first, second = Eagle3Drafter(checkpoint=config.out), Eagle3Drafter(checkpoint=more.out)
    for drafter in (first, second):
        drafter.reset(llama_target.handle)
    assert torch.equal(first.module.d2t, second.module.d2t)
    assert not torch.equal(first.module.fc.weight, second.module.fc.weight)  # it trained on
    wrong = distil_random_prompts(llama_target, tmp_path / "other-layers", seed=3, aux_layers=[0, 0, 1])
    with pytest.raises(SpecbenchError, match="reads layers"):
        train_eagle3(Eagle3TrainConfig(cache=str(wrong), out=str(tmp_path / "w"), init_from=config.out), llama_target,
                     progress=False)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_chain_attention_equals_the_dense_masked_attention(kv_heads):
    """`Eagle3Layer.attend_chains` (the context causally, each row's own chain as dot products) gives what
    `attend` gives over the context and chain keys concatenated, under the causal-then-diagonal mask the
    unrolled levels used to build; a wrong diagonal (a row seeing its neighbour's chain) is caught."""
    from specbench.drafters.eagle3 import Eagle3Layer

    torch.manual_seed(0)
    layer = Eagle3Layer(hidden=32, num_heads=4, num_kv_heads=kv_heads, inner=48, head_dim=8)
    anchors, chain = 7, 3
    x, residual = torch.randn(anchors, 64), torch.randn(anchors, 32)
    positions = torch.arange(anchors) + 2
    keys, values = torch.randn(anchors, kv_heads, 8), torch.randn(anchors, kv_heads, 8)
    chain_keys, chain_values = torch.randn(chain, anchors, kv_heads, 8), torch.randn(chain, anchors, kv_heads, 8)
    rows = torch.arange(anchors)
    own = torch.eye(anchors, dtype=torch.bool)
    mask = torch.cat([rows[:, None] >= rows[None, :]] + [own] * chain, dim=1)  # [P, P + C P]
    dense = layer.attend(x, residual, positions, torch.cat([keys, *chain_keys]), torch.cat([values, *chain_values]), mask)
    fast = layer.attend_chains(x, residual, positions, keys, values, chain_keys, chain_values)
    torch.testing.assert_close(fast, dense, rtol=1e-5, atol=1e-5)
    shifted = layer.attend_chains(x, residual, positions, keys, values, chain_keys.roll(1, dims=1), chain_values)
    assert not torch.allclose(shifted, dense, atol=1e-3)


@pytest.mark.parametrize("first", [1, 4, 6])
def test_unrolling_from_a_later_anchor_gives_the_same_rows(first):
    """`Eagle3Module.forward_unrolled` with ``first`` (the prompt's anchors give only the true context: what
    training scores) gives the rows of the whole unroll from ``first`` on, at every level; a chain mask that
    forgot the offset (query row i seeing keys up to i, not first + i) is caught."""
    from specbench.drafters.eagle3 import Eagle3Module

    torch.manual_seed(0)
    module = Eagle3Module(hidden=32, num_heads=4, vocab_size=50, layer_ids=[0, 1, 2], num_kv_heads=2, inner=48)
    anchors, levels = 7, 4
    aux, embeddings = torch.randn(anchors, 96), torch.randn(anchors + levels - 1, 32)
    with torch.no_grad():
        whole = module.forward_unrolled(aux, embeddings, levels)  # levels x [P, H]
        later = module.forward_unrolled(aux, embeddings, levels, first)  # levels x [P - first, H]
        for full, part in zip(whole, later, strict=True):
            torch.testing.assert_close(part, full[first:], rtol=1e-5, atol=1e-6)
        layer, x, residual = module.layer, torch.randn(3, 64), torch.randn(3, 32)
        keys, values = torch.randn(anchors, 2, 8), torch.randn(anchors, 2, 8)
        chain_keys, chain_values = torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8)
        positions = torch.arange(first, first + 3)
        offset = layer.attend_chains(x, residual, positions, keys, values, chain_keys, chain_values, min(first, 4))
        forgot = layer.attend_chains(x, residual, positions, keys, values, chain_keys, chain_values, 0)
        assert not torch.allclose(offset, forgot, atol=1e-3)
    with pytest.raises(ValueError, match="first anchor"):
        module.forward_unrolled(aux, embeddings, levels, anchors)



def test_aux_layers_default_or_given_and_bad_ids_refused_in_one_line():
    """``distill --aux-layers`` alone records EAGLE-3's layers; ``--aux-layers 2,15,29`` the ids given (the top
    feature layer is the experiment on eagle3's first draft); bad ids are one line naming the flag."""
    from specbench.harness.cli.train import aux_layer_ids

    assert aux_layer_ids(None, 30) is None
    assert aux_layer_ids("default", 30) == default_layer_ids(30) == [2, 15, 27]
    assert aux_layer_ids("2,15,29", 30) == [2, 15, 29]
    for bad, fragment in [("2,15,30", "from 0 to 29"), ("2,2,15", "distinct"), ("low,mid", "like 2,15,29"),
                          ("-1,3,5", "from 0 to 29")]:
        with pytest.raises(SpecbenchError, match=fragment) as error:
            aux_layer_ids(bad, 30)
        assert "\n" not in str(error.value) and "--aux-layers" in str(error.value)


def test_a_cache_of_other_feature_layers_trains_a_drafter_that_reads_them(llama_target, tmp_path):
    """The cache's layer ids become the checkpoint's, the drafter taps those layers, and it stays exact."""
    layer_ids = [0, llama_target.config.num_hidden_layers - 1]  # two layers, the top one included
    assert layer_ids != default_layer_ids(llama_target.config.num_hidden_layers)
    cache = distil_random_prompts(llama_target, tmp_path / "cache", seed=4, aux_layers=layer_ids)
    config = Eagle3TrainConfig(cache=str(cache), out=str(tmp_path / "eagle3"), epochs=1, lr=5e-3, samples_per_step=2,
                               warmup_steps=1, ttt_steps=2, draft_vocab=60)
    recipe = train_eagle3(config, llama_target, progress=False)
    assert recipe["hyperparameters"]["layer_ids"] == layer_ids
    drafter = Eagle3Drafter(checkpoint=config.out, top_k=3, depth=2)
    drafter.reset(llama_target.handle)
    assert drafter.module.layer_ids == layer_ids
    assert drafter.module.fc.in_features == len(layer_ids) * llama_target.config.hidden_size
    for prompt in PROMPTS[:2]:
        assert generate(llama_target, drafter, prompt, 16, 6).output_ids == \
            plain_greedy(llama_target.model, prompt, 16, llama_target.eos_ids)
