"""Scaled RoPE (Llama-3's ``rope_scaling``) in the draft layers: a published EAGLE layer for a tiny Llama-3-style
target rotates its queries and keys exactly as the target's own rotary embedding does, predicts what the
LLaMA layer it was cut from predicts, and eagle stays exact (ids equal plain greedy) on such a target,
published or trained by specbench."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from conftest import EOS, PROMPTS, VOCAB, make_target, plain_greedy
from specbench.drafters.eagle import EagleDrafter
from specbench.drafters.layers import rope
from specbench.drafters.published import rope_base
from specbench.harness.loop import generate
from test_published import write_eagle

pytestmark = pytest.mark.usefixtures("single_thread")

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


@pytest.fixture(scope="module")
def llama3_target():
    """A tiny Llama-3-style target (the tiny Llama of conftest with rope_theta 500000 and llama3 scaling)."""
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, max_position_embeddings=512, bos_token_id=1,
                         pad_token_id=0, eos_token_id=EOS, initializer_range=0.02, rope_theta=500000.0,
                         rope_scaling=dict(LLAMA3))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight[EOS] = 0.0
    model.generation_config.eos_token_id = EOS
    assert model.config.rope_parameters["rope_type"] == "llama3"
    return make_target(model)


def test_scaled_rope_is_read_not_refused(llama3_target, tmp_path):
    params = rope_base(llama3_target.config, tmp_path)
    assert params["rope_type"] == "llama3" and params["rope_theta"] == 500000.0 and params["factor"] == 8.0
    assert params["max_position_embeddings"] == 512
    legacy = type("Released", (), {"rope_theta": 500000.0, "rope_scaling": dict(LLAMA3), "max_position_embeddings": 512})
    assert rope_base(legacy, tmp_path) == params  # a released draft's 4.x-style config.json reads the same
    plain = LlamaConfig(rope_theta=20000.0)
    assert rope_base(plain, tmp_path) == 20000.0  # plain RoPE stays a float, as recipes record it


@pytest.mark.parametrize("positions", [[0, 1, 2, 3], [5, 63, 64, 65, 200, 511], [700, 1000]])
def test_rope_matches_the_targets_rotary_embedding(llama3_target, positions):
    """layers.rope with the target's RoPE parameters == transformers' apply_rotary_pos_emb with the cos/sin of
    the target's own ``rotary_emb``, at positions below, across and beyond original_max_position_embeddings."""
    heads, head_dim = 4, llama3_target.config.hidden_size // 4
    positions = torch.tensor(positions)
    q = torch.randn(len(positions), heads, head_dim, generator=torch.Generator().manual_seed(1))
    cos, sin = llama3_target.model.model.rotary_emb(q, positions[None])  # [1, P, d]
    expected, _ = apply_rotary_pos_emb(q.transpose(0, 1)[None], q.transpose(0, 1)[None], cos, sin)  # [1, heads, P, d]
    got = rope(q, positions, rope_base(llama3_target.config, "target"))
    torch.testing.assert_close(got, expected[0].transpose(0, 1), rtol=0, atol=1e-6)
    assert not torch.allclose(got, rope(q, positions, 500000.0), atol=1e-4) or positions.max() < 16  # scaling matters


def test_published_eagle_on_a_llama3_target_predicts_what_the_llama_layer_gives_and_stays_exact(llama3_target, tmp_path):
    fc, reference = write_eagle(tmp_path / "eagle", llama3_target.config)
    assert reference.rotary_emb.rope_type == "llama3"
    drafter = EagleDrafter(checkpoint=str(tmp_path / "eagle"), top_k=3, depth=2)
    drafter.reset(llama3_target.handle)
    assert drafter.module.layer.rope_base["rope_type"] == "llama3"
    n = 80  # positions past original_max_position_embeddings (64), where llama3 scaling changes the rotation
    hidden = torch.randn(n, llama3_target.config.hidden_size, generator=torch.Generator().manual_seed(6))
    tokens = torch.randint(2, VOCAB - 1, (n + 1,), generator=torch.Generator().manual_seed(7))
    embed = llama3_target.handle.embed_tokens
    with torch.no_grad():
        fused = fc(torch.cat([embed(tokens[1:]), hidden], dim=-1))
        expected = reference(inputs_embeds=fused[None]).last_hidden_state[0]  # [n, H]
        got = drafter.module.forward_sequence(hidden, embed(tokens[1:]))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    for prompt in PROMPTS:
        for budget in (2, 10):
            result = generate(llama3_target, drafter, prompt, 16, budget)
            assert result.output_ids == plain_greedy(llama3_target.model, prompt, 16, llama3_target.eos_ids)


def test_trained_eagle_stays_exact_on_a_llama3_target(llama3_target, drafter_for):
    drafter = drafter_for("eagle", llama3_target)
    for prompt in PROMPTS:
        for budget in (2, 8):
            result = generate(llama3_target, drafter, prompt, 16, budget)
            assert result.output_ids == plain_greedy(llama3_target.model, prompt, 16, llama3_target.eos_ids)
