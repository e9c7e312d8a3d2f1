"""Verify cost by tree size: one `TargetModel.forward_tree` over a cached prefix, for trees of 1 to 64
nodes, as chains and as bushy trees.

Why: the verification forward is ~99% of a decode step (docs/performance.md), and its growth with tree
size decides which tree budget pays off on a machine. A regression in the tree mask, the position ids, the
``lm_head`` over all nodes or the cache append shows here first. The table docs/performance.md prints with
``benchmarks/verify_cost.py`` is the same measurement, with the same helpers (`benchlib`).
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.benchlib import TREE_SHAPES, prefilled_cache, rewind, tree_of_size
from specbench import kv

SIZES = (1, 2, 4, 8, 16, 32, 64)
PREFIX = 144  # cached positions: the demo prompt (52 tokens) and the first 92 tokens of its answer
ROUNDS = 8


@pytest.fixture(scope="module")
def prefix_cache(target, transcript):
    """A cache holding the first `PREFIX` tokens of a real turn, shared by this module's benchmarks (each
    round rewinds it to `PREFIX` positions before verifying)."""
    ids = transcript.ids(PREFIX)
    assert len(ids) == PREFIX
    return prefilled_cache(target, torch.tensor(ids, dtype=torch.long))  # PREFIX positions


@pytest.mark.parametrize("shape", TREE_SHAPES)
@pytest.mark.parametrize("size", SIZES)
def test_verify_forward(benchmark, target, prefix_cache, size: int, shape: str) -> None:
    """One verification forward of a ``size``-node ``shape`` tree over `PREFIX` cached tokens: the target
    body with the 4D tree mask, then ``lm_head`` on every node. Rounds start from the same prefix: the
    tree's slots are dropped again before each one (not timed)."""
    tree = tree_of_size(size, shape)
    benchmark.group = f"verify-{shape}"
    benchmark.extra_info.update(nodes=size, depth=tree.max_depth(), prefix=PREFIX)

    def setup():
        rewind(prefix_cache, PREFIX)
        return (tree, prefix_cache), {}

    logits, hidden = benchmark.pedantic(target.forward_tree, setup=setup, rounds=ROUNDS, warmup_rounds=1)
    assert logits.shape == (size, target.config.vocab_size)  # [n, V]
    assert hidden.shape == (size, target.config.hidden_size)  # [n, H]
    assert kv.cached_length(prefix_cache) == PREFIX + size  # the step appended one slot per node
    rewind(prefix_cache, PREFIX)
