"""benchmarks.tree_step_cost's two drafters do what its tables assume (fixed: every draft rejected; oracle: every
draft accepted, ids still plain greedy's), and benchmarks.tree_attention times every cell under each kernel."""

from __future__ import annotations

import pytest

from benchmarks.tree_attention import table, time_cells
from benchmarks.tree_step_cost import FixedChain, OracleChain, verify_by_nodes
from conftest import PROMPTS, plain_greedy
from specbench.drafters.vanilla import VanillaDrafter
from specbench.harness.loop import generate

pytestmark = pytest.mark.usefixtures("single_thread")


def test_fixed_chains_are_rejected_and_oracle_chains_accepted(llama_target):
    prompt = PROMPTS[0]
    plain = plain_greedy(llama_target.model, prompt, 24, llama_target.eos_ids)
    fixed = generate(llama_target, FixedChain(), prompt, 24, 3, breakdown=True)
    assert fixed.output_ids == plain
    assert {step.nodes for step in fixed.steps} == {3} and all(step.accepted == 1 for step in fixed.steps[:-1])
    oracle = generate(llama_target, OracleChain({tuple(prompt): plain}), prompt, 24, 3, breakdown=True)
    assert oracle.output_ids == plain
    assert all(step.accepted == 3 for step in oracle.steps[:-1])  # the last step may be cut by the length cap
    assert sorted(verify_by_nodes(oracle)) == [3] and len(verify_by_nodes(oracle)[3]) == len(oracle.steps)
    vanilla = generate(llama_target, VanillaDrafter(), prompt, 24, 1)
    assert len(oracle.steps) < len(fixed.steps) == len(vanilla.steps)


def test_oracle_refuses_a_prompt_it_has_not_decoded(llama_target):
    with pytest.raises(ValueError, match="no plain decoding"):
        generate(llama_target, OracleChain({(1, 2, 3): [4, 5]}), PROMPTS[1], 8, 3)


def test_tree_attention_times_each_kernel_prefix_and_size(llama_target):
    medians = time_cells(llama_target, ["grouped", "repeat"], [20, 60], [1, 3], rounds=1)
    assert set(medians) == {(k, p, n) for k in ("grouped", "repeat") for p in (20, 60) for n in (1, 3)}
    assert all(value > 0 for value in medians.values())
    assert llama_target.attention_kernel == "grouped" and llama_target.config._attn_implementation != "sdpa"
    lines = table(medians, ["grouped", "repeat"], [20, 60], [1, 3]).splitlines()
    assert len(lines) == 2 + 4 and lines[2].startswith("| grouped | 20 |") and "(1.000)" in lines[2]
