"""eagle3: exact at T = 0 on the tiny targets with untrained weights; the target's layer taps; the speculators
format and the authors' EAGLE-3 layout, read, written and round-tripped; malformed or mismatched directories
refused with one line.

The layouts are built here from the published field names, not from specbench's writer:
- speculators: vllm-project/speculators at c05b95b303f7d4f21e8d7624e0ffa1c2d9b4d73b (src/speculators/config.py:
  ``speculators_config`` {algorithm, proposal_methods, default_proposal_method, verifier {name_or_path,
  architectures}}; src/speculators/models/eagle3/config.py ``Eagle3SpeculatorConfig``: transformer_layer_config,
  draft_vocab_size, norm_before_residual, target_hidden_size, eagle_aux_hidden_state_layer_ids, norm_before_fc,
  fc_norm, norm_output, embed_requires_grad; src/speculators/proposals/greedy.py; weight names from
  src/speculators/convert/eagle/eagle3_converter.py, ``midlayer.*`` -> ``layers.0.*``);
- the authors': SafeAILab/EAGLE at cb7e0841fe0c206c6ed74a197ad5e2a1f13f5a2b (eagle/model/cnets.py ``Model``: fc,
  midlayer.{self_attn, mlp, hidden_norm, input_layernorm, post_attention_layernorm}, norm, lm_head, d2t, t2d;
  eagle/traineagle3/config.json: a one-layer LLaMA config with draft_vocab_size).
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from conftest import PROMPTS, plain_greedy, recorded
from specbench.drafters.eagle3 import Eagle3Drafter, untrained_checkpoint
from specbench.drafters.speculators import write_eagle3
from specbench.errors import SpecbenchError
from specbench.harness.loop import generate

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def stem(tmp_path_factory, llama_target):
    return untrained_checkpoint(tmp_path_factory.mktemp("e3") / "eagle3", llama_target.handle, draft_vocab=60, seed=3)


@pytest.mark.parametrize("draft_vocab", [None, 40])
def test_untrained_eagle3_equals_greedy_at_every_budget(tiny_target, reference, tmp_path, draft_vocab):
    drafter = Eagle3Drafter(checkpoint=str(untrained_checkpoint(tmp_path / "e3", tiny_target.handle, draft_vocab)))
    for budget in (1, 2, 3, 8, 16, 40):
        for prompt in PROMPTS:
            assert generate(tiny_target, drafter, prompt, 24, budget).output_ids == reference(prompt, 24), budget


def test_context_vocab_scores_the_sequences_own_tokens_with_the_targets_rows(llama_target, stem):
    """With context_vocab the draft vocabulary gains the prompt's and answer's tokens outside its V' rows (each
    scored by the target's lm_head row); without it (the default) none. Both decode plain greedy, the option is
    part of the drafter's identity, and a new sequence forgets the last one's words."""
    own = Eagle3Drafter(checkpoint=str(stem))
    own.reset(llama_target.handle)
    rows = set(own.vocab.ids.tolist())
    prompt = [token for token in range(llama_target.handle.lm_head.weight.shape[0]) if token not in rows][:3] + \
        sorted(rows)[:3]
    greedy = plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)
    identities = []
    for context_vocab in (True, "false"):
        drafter = Eagle3Drafter(checkpoint=str(stem), context_vocab=context_vocab)
        result = generate(llama_target, drafter, prompt, 20, 8)
        assert result.output_ids == greedy
        outside = set(drafter.vocab.columns.tolist()) - rows
        if context_vocab is True:
            assert set(prompt) - rows <= outside <= set(prompt + result.output_ids) - rows
            extra = drafter.vocab.columns[len(rows):]
            features = torch.randn(2, llama_target.handle.lm_head.weight.shape[1])
            with torch.inference_mode():
                assert torch.allclose(drafter.vocab.logits(features)[:, len(rows):],
                                      llama_target.handle.lm_head(features)[:, extra], atol=1e-5)
        else:
            assert not outside
        identities.append(drafter.identity())
        drafter.reset(llama_target.handle)
        assert drafter.vocab.columns.tolist() == drafter.vocab.ids.tolist()
    assert identities[0] != identities[1]


def test_taps_record_the_hidden_states_entering_layers(tiny_target):
    taps = tiny_target.handle.taps
    taps.request([0, 1, 2])
    before = taps.forwards
    out = tiny_target.model.base_model(input_ids=torch.tensor([PROMPTS[0]]), output_hidden_states=True)
    assert taps.forwards == before + 1
    assert torch.equal(taps.states([0, 1]), torch.cat([out.hidden_states[0][0], out.hidden_states[1][0]], -1))
    assert taps.states([2]).shape == (len(PROMPTS[0]), 32)  # the last layer's output, before the final norm


class NoTaps(Eagle3Drafter):
    """eagle3 as if no forward had recorded its layer taps: it runs the target's decoder itself."""

    def target_features(self, ctx):
        self._first, self._pending = False, None
        return super().target_features(ctx)


def test_without_recorded_taps_eagle3_drafts_as_the_real_run(llama_target, stem):
    """With no forward's taps to read, eagle3 runs the target's decoder itself: same trees."""
    real = recorded(Eagle3Drafter(checkpoint=str(stem)), llama_target, PROMPTS[2], 8)
    assert recorded(NoTaps(checkpoint=str(stem)), llama_target, PROMPTS[2], 8) == real


def test_replay_hands_eagle3_the_taps_a_run_records(llama_target, stem):
    """Replay's stand-in target records the trajectory's layer taps for each prefill and step, so eagle3 reads
    them as in a real run (same trees) and never runs the target itself (the calibration cost it once had)."""
    from specbench.harness.autobudget.replay import replay
    from specbench.harness.autobudget.trajectories import record_trajectory

    real = recorded(Eagle3Drafter(checkpoint=str(stem)), llama_target, PROMPTS[2], 8, n=12)[1]
    trajectory = record_trajectory(llama_target, PROMPTS[2], 12)
    trees, calls = [], []

    class Spy(Eagle3Drafter):
        def propose(self, ctx):
            tree = super().propose(ctx)
            trees.append((tree.tokens.tolist(), tree.parents.tolist()))
            return tree

        def own_forward(self, ctx):
            calls.append(ctx.first_new_position)
            return super().own_forward(ctx)

    drafter = Spy(checkpoint=str(stem))
    steps = replay(llama_target, drafter, trajectory, 12, 8).steps
    assert trees == real and not calls
    assert all("replayed_target" not in step.stage_ms for step in steps)
    assert set(drafter.module.layer_ids) <= set(trajectory.taps)  # computed once, kept for the next budget


def test_the_target_run_again_is_not_counted_as_drafting(llama_target, stem):
    """Where eagle3 runs the target itself for the features a real run's forwards record for free, that time is
    its own sub-stage (``replayed_target``), left out of the draft cost `auto` predicts with."""
    import statistics
    import time

    from specbench.harness.autobudget.replay import replay
    from specbench.harness.autobudget.trajectories import record_trajectory

    pause_s = 0.2  # far above the tiny drafter's own cost, even on a loaded CI machine

    class SlowTarget(NoTaps):
        def own_forward(self, ctx):
            time.sleep(pause_s)
            return super().own_forward(ctx)

    trajectory = record_trajectory(llama_target, PROMPTS[2], 12)
    steps = replay(llama_target, SlowTarget(checkpoint=str(stem)), trajectory, 12, 8).steps
    assert steps and all(step.stage_ms["replayed_target"] >= 1000 * pause_s for step in steps)
    # Counted as drafting, every step's draft_ms would be at least the pause; the median step (robust to a
    # scheduling hiccup on a shared machine) stays well under half of it.
    assert statistics.median(step.draft_ms for step in steps) < 500 * pause_s


@pytest.mark.parametrize("layout", ["speculators", "authors"])
def test_round_trip_drafts_identically(llama_target, stem, tmp_path, layout):
    """specbench -> speculators (or the authors' layout) -> specbench, and on to the other layout and back."""
    original = Eagle3Drafter(checkpoint=str(stem))
    original.reset(llama_target.handle)
    write_eagle3(original.module, original.recipe["hyperparameters"], llama_target.handle, tmp_path / "a", layout, "tiny")
    loaded = Eagle3Drafter(checkpoint=str(tmp_path / "a"))
    loaded.reset(llama_target.handle)
    other = "authors" if layout == "speculators" else "speculators"
    write_eagle3(loaded.module, loaded.recipe["hyperparameters"], llama_target.handle, tmp_path / "b", other, "tiny")
    assert loaded.recipe["imported"]["layout"] == ("speculators-eagle3" if layout == "speculators" else "eagle3-authors")
    for prompt in PROMPTS[:3]:
        for budget in (4, 12):
            want = recorded(original, llama_target, prompt, budget)
            assert recorded(loaded, llama_target, prompt, budget) == want
            assert recorded(Eagle3Drafter(checkpoint=str(tmp_path / "b")), llama_target, prompt, budget) == want
            assert want[0] == plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)


def published_weights(target, draft_vocab=50, prefix="layers.0.", seed=0):
    """EAGLE-3 weights under the published names for the tiny Llama (hidden 32, 4 heads, 2 kv heads, MLP 64)."""
    g = torch.Generator().manual_seed(seed)
    hidden, vocab = 32, 97
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.2  # noqa: E731
    ids = torch.randperm(vocab, generator=g)[:draft_vocab].sort().values
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    return {"fc.weight": r(hidden, 3 * hidden), f"{prefix}input_layernorm.weight": 1 + r(hidden),
            f"{prefix}hidden_norm.weight": 1 + r(hidden), f"{prefix}self_attn.q_proj.weight": r(32, 2 * hidden),
            f"{prefix}self_attn.k_proj.weight": r(16, 2 * hidden), f"{prefix}self_attn.v_proj.weight": r(16, 2 * hidden),
            f"{prefix}self_attn.o_proj.weight": r(hidden, 32), f"{prefix}post_attention_layernorm.weight": 1 + r(hidden),
            f"{prefix}mlp.gate_proj.weight": r(64, hidden), f"{prefix}mlp.up_proj.weight": r(64, hidden),
            f"{prefix}mlp.down_proj.weight": r(hidden, 64), "norm.weight": 1 + r(hidden),
            "lm_head.weight": r(draft_vocab, hidden), "d2t": ids - torch.arange(draft_vocab), "t2d": t2d,
            "embed_tokens.weight": r(vocab, hidden)}


LAYER = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": 97, "max_position_embeddings": 512,
         "tie_word_embeddings": False}


def speculators_config(**changes) -> dict:
    config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.3.0",
              "speculators_config": {"algorithm": "eagle3",
                                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                                           "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                                     "default_proposal_method": "greedy",
                                     "verifier": {"name_or_path": "tiny-llama", "architectures": ["LlamaForCausalLM"]}},
              "transformer_layer_config": dict(LAYER), "draft_vocab_size": 50, "norm_before_residual": False,
              "target_hidden_size": None, "eagle_aux_hidden_state_layer_ids": [0, 1, 2], "norm_before_fc": False,
              "fc_norm": False, "norm_output": False, "embed_requires_grad": False}
    return config | changes


def write_speculators_dir(folder, config, state):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def write_authors_dir(folder, config, state):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    torch.save(state, folder / "pytorch_model.bin")
    return folder


def test_published_layouts_load_and_stay_exact(llama_target, tmp_path):
    """A speculators directory and the authors' directory with the same weights draft the same trees; both exact."""
    spec = write_speculators_dir(tmp_path / "spec", speculators_config(), published_weights(llama_target))
    authors = write_authors_dir(tmp_path / "authors", LAYER | {"draft_vocab_size": 50},
                                published_weights(llama_target, prefix="midlayer."))
    for prompt in PROMPTS:
        a = recorded(Eagle3Drafter(checkpoint=str(spec)), llama_target, prompt, 10)
        b = recorded(Eagle3Drafter(checkpoint=str(authors)), llama_target, prompt, 10)
        assert a == b  # the authors' code fixes the layers at 2, N // 2, N - 3: for 2 layers specbench's 0, 1, 2
        assert a[0] == plain_greedy(llama_target.model, prompt, 20, llama_target.eos_ids)
        assert max(len(t[0]) for t in a[1]) > 1


def refusal(target, folder) -> str:
    drafter = Eagle3Drafter(checkpoint=str(folder))
    with pytest.raises(SpecbenchError) as error:
        drafter.reset(target.handle)
    message = str(error.value)
    assert "\n" not in message
    return message


def broken_block(**changes):
    config = speculators_config()
    config["speculators_config"] = config["speculators_config"] | changes
    return config


def without(config, key):
    return {k: v for k, v in config.items() if k != key}


@pytest.mark.parametrize("config, state_change, expected", [
    (without(speculators_config(), "speculators_config"), None, "lacks 'speculators_config'"),
    (speculators_config(speculators_model_type="mlp"), None, "speculators_model_type 'mlp'"),
    (broken_block(default_proposal_method="tree"), None, "default_proposal_method 'tree'"),
    (broken_block(verifier={"name_or_path": "x"}), None, "verifier needs name_or_path and architectures"),
    (broken_block(verifier={"name_or_path": "x", "architectures": ["Qwen3ForCausalLM"]}), None, "architecture"),
    (speculators_config(norm_before_fc=True), None, "norm_before_fc"),
    (speculators_config(transformer_layer_config=LAYER | {"hidden_size": 64}), None, "hidden size 64"),
    (speculators_config(transformer_layer_config=LAYER | {"vocab_size": 128256}), None, "vocabulary of 128256"),
    (speculators_config(transformer_layer_config=LAYER | {"num_hidden_layers": 2}), None, "2 draft layers"),
    (speculators_config(eagle_aux_hidden_state_layer_ids=[1, 2]), None, "fc.weight has shape"),
    (speculators_config(eagle_aux_hidden_state_layer_ids=[2, 15, 27]), None, "not layers 0..2"),
    (speculators_config(draft_vocab_size=64), None, "lm_head.weight has shape"),
    (speculators_config(), "drop", "'layers.0.hidden_norm.weight' is missing"),
    (speculators_config(), "extra", "does not have: layers.1.mlp.up_proj.weight"),
    (speculators_config(), "d2t", "d2t and t2d disagree"),
])
def test_malformed_or_mismatched_directories_are_refused_with_one_line(llama_target, tmp_path, config, state_change,
                                                                       expected):
    state = published_weights(llama_target)
    if state_change == "drop":
        del state["layers.0.hidden_norm.weight"]
    elif state_change == "extra":
        state["layers.1.mlp.up_proj.weight"] = torch.zeros(1)
    elif state_change == "d2t":
        state["d2t"] = torch.zeros(50, dtype=torch.long)
    assert expected in refusal(llama_target, write_speculators_dir(tmp_path / "bad", config, state))


def test_other_drafters_name_the_directory_they_cannot_read(llama_target, tmp_path):
    from specbench.drafters.eagle import EagleDrafter

    folder = write_speculators_dir(tmp_path / "spec", speculators_config(), published_weights(llama_target))
    drafter = EagleDrafter(checkpoint=str(folder))
    with pytest.raises(SpecbenchError, match="eagle3.checkpoint="):
        drafter.reset(llama_target.handle)


def test_no_shipped_checkpoint_is_a_clean_refusal(llama_target):
    with pytest.raises(SpecbenchError, match="no shipped eagle3 checkpoint"):
        Eagle3Drafter().reset(llama_target.handle)
