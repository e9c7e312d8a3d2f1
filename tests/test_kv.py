"""KV commit then decode equals a fresh prefill.

Prefill a prompt, score a draft tree (its K/V land in the cache in node order), commit one root-to-node
path, and the cache must hold what a fresh prefill of prompt + path tokens holds; decoding the next token
from it must give the same logits. On every tiny architecture, the sliding-window Gemma3 included.
"""

from __future__ import annotations

import random

import pytest
import torch
from transformers import DynamicCache

from conftest import EOS, PROMPTS
from specbench import DraftTree, kv

pytestmark = pytest.mark.usefixtures("single_thread")

ATOL = 1e-5


def random_tree(rng: random.Random, n: int, deep: bool = True) -> DraftTree:
    """n nodes; with ``deep`` most nodes hang off one of the last few nodes, so depth exceeds the
    sliding window."""
    parents = [-1]
    for i in range(1, n):
        parents.append(rng.randrange(max(0, i - 3), i) if deep else rng.randrange(i))
    tokens = [rng.randrange(EOS) for _ in range(n)]
    return DraftTree(torch.tensor(tokens), torch.tensor(parents))


#         0
#        / \
#       1   2
#      / \   \
#     3   4   6
#     |
#     5
LITERAL = DraftTree(torch.tensor([10, 11, 12, 13, 14, 15, 16]), torch.tensor([-1, 0, 0, 1, 1, 3, 2]))


def assert_same_cache(cache, fresh) -> None:
    assert kv.cached_length(cache) == kv.cached_length(fresh)
    assert len(cache.layers) == len(fresh.layers)
    for layer, ref in zip(cache.layers, fresh.layers):
        assert layer.keys.shape == ref.keys.shape
        torch.testing.assert_close(layer.keys, ref.keys, atol=ATOL, rtol=0)
        torch.testing.assert_close(layer.values, ref.values, atol=ATOL, rtol=0)


def commit_and_compare(target, prompt: list[int], tree: DraftTree, node: int) -> None:
    cache = target.new_cache()
    target.prefill(torch.tensor(prompt), cache)
    past = kv.cached_length(cache)
    logits, _ = target.forward_tree(tree, cache)
    assert kv.cached_length(cache) == past + len(tree)
    path = tree.path_to(node)
    kv.commit_path(cache, past, path, len(tree))
    assert kv.cached_length(cache) == past + len(path)

    path_tokens = [int(tree.tokens[i]) for i in path]
    fresh = target.new_cache()
    target.prefill(torch.tensor(prompt + path_tokens), fresh)
    assert_same_cache(cache, fresh)

    # Decode on: the bonus token at the committed node, through both caches and without any cache.
    bonus = int(logits[node].argmax())
    after_commit, _ = target.forward_tree(DraftTree.root_only(bonus), cache)
    after_fresh, _ = target.forward_tree(DraftTree.root_only(bonus), fresh)
    with torch.inference_mode():
        no_cache = target.model(input_ids=torch.tensor([prompt + path_tokens + [bonus]])).logits[0, -1]
    torch.testing.assert_close(after_commit[0], after_fresh[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(after_commit[0], no_cache, atol=1e-4, rtol=0)
    assert int(after_commit[0].argmax()) == int(no_cache.argmax())


@pytest.mark.parametrize(
    "node",
    [0, 1, 2, 4, 5, 6],
    ids=["root-only", "prefix-path", "second-branch", "leaf-of-first-branch", "deepest", "second-branch-leaf"],
)
def test_commit_literal_tree_paths(tiny_target, node):
    commit_and_compare(tiny_target, PROMPTS[0], LITERAL, node)


def test_commit_whole_chain_is_a_no_op(tiny_target):
    chain = DraftTree.chain(7, [8, 9, 10, 11, 12, 13])  # deeper than the sliding window
    commit_and_compare(tiny_target, PROMPTS[1], chain, len(chain) - 1)
    commit_and_compare(tiny_target, PROMPTS[1], chain, 3)


@pytest.mark.parametrize("seed", range(3))
def test_commit_every_path_of_a_random_tree(tiny_target, seed):
    rng = random.Random(seed)
    tree = random_tree(rng, 12, deep=seed != 0)
    prompt = PROMPTS[seed % len(PROMPTS)]
    for node in range(len(tree)):
        commit_and_compare(tiny_target, prompt, tree, node)


def test_several_commits_equal_one_prefill(tiny_target):
    """Three tree steps, each committing a non-prefix path, leave the cache of the whole sequence."""
    rng = random.Random(7)
    prompt = list(PROMPTS[2])
    cache = tiny_target.new_cache()
    tiny_target.prefill(torch.tensor(prompt), cache)
    sequence = list(prompt)
    for _ in range(3):
        tree = random_tree(rng, 10)
        past = kv.cached_length(cache)
        tiny_target.forward_tree(tree, cache)
        node = max(range(len(tree)), key=lambda i: (tree.depths()[i], i))  # deepest, last: not a prefix
        path = tree.path_to(node)
        assert path != list(range(len(path)))
        kv.commit_path(cache, past, path, len(tree))
        sequence += [int(tree.tokens[i]) for i in path]
    fresh = tiny_target.new_cache()
    tiny_target.prefill(torch.tensor(sequence), fresh)
    assert_same_cache(cache, fresh)


# ---- commit_path on hand-made tensors (no model) --------------------------------------------------------


def labelled_cache(length: int, layers: int = 2) -> DynamicCache:
    """A cache whose position p holds the value p in keys and -p in values (shape [1, 2, length, 3])."""
    cache = DynamicCache()
    pos = torch.arange(length, dtype=torch.float32)[None, None, :, None].expand(1, 2, length, 3).clone()
    for layer in range(layers):
        cache.update(pos + 100 * layer, -pos - 100 * layer, layer)
    return cache


@pytest.mark.parametrize(
    "path, expected",
    [
        ([0], [0, 1, 2, 3]),
        ([0, 1, 2], [0, 1, 2, 3, 4, 5]),
        ([0, 2, 5], [0, 1, 2, 3, 5, 8]),
        ([0, 3, 4], [0, 1, 2, 3, 6, 7]),
        ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6, 7, 8]),
    ],
)
def test_commit_path_moves_slots(path, expected):
    past, n = 3, 6
    cache = labelled_cache(past + n)
    kv.commit_path(cache, past, path, n)
    assert kv.cached_length(cache) == past + len(path)
    for layer_idx, layer in enumerate(cache.layers):
        assert layer.keys.shape == (1, 2, len(expected), 3)
        want = torch.tensor(expected, dtype=torch.float32) + 100 * layer_idx
        assert torch.equal(layer.keys[0, 1, :, 2], want)
        assert torch.equal(layer.values[0, 0, :, 0], -want)


def test_commit_path_skips_empty_layers():
    cache = labelled_cache(5, layers=1)
    cache.layers.append(type(cache.layers[0])())  # an uninitialised layer (e.g. KV sharing)
    kv.commit_path(cache, 2, [0, 2], 3)
    assert cache.layers[0].keys[0, 0, :, 0].tolist() == [0, 1, 2, 4]
