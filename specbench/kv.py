"""The only module that touches KV-cache internals.

After a tree step the cache holds ``past + n`` positions: the committed prefix, then one slot per tree
node in node order. Committing keeps the accepted path's slots, moved into consecutive positions right
after the prefix, and drops the rest, so the cache again equals what sequential decoding would hold.

The cache is a transformers ``DynamicCache`` built without a config, so every layer is a plain
``DynamicLayer`` holding ``keys`` / ``values`` of shape [batch, kv_heads, seq, head_dim] (sliding-window
models get their window from the attention mask instead; see `specbench.model`). The compiled regime's
cache, `specbench.static_cache.TreeStaticCache`, is preallocated; the functions below hand it to its own
methods (device moves, no reallocation).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from specbench.static_cache import TreeStaticCache, bucket_of


def cache_keyword(module: torch.nn.Module) -> str:
    """The keyword ``module``'s forward takes its KV cache by: ``cache`` (transformers 5.24 and later) or
    ``past_key_values`` (earlier 5.x, e.g. the 5.17 GPU images ship). A wrong one lands silently in
    ``**kwargs`` and the model decodes on an empty cache of its own, so callers look it up once per module."""
    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


def new_cache() -> DynamicCache:
    """An empty cache whose layers are all full-length `DynamicLayer`s."""
    return DynamicCache()


def cached_length(cache: DynamicCache) -> int:
    if isinstance(cache, TreeStaticCache):
        return cache.past
    return cache.get_seq_length()


def reserve(cache, positions: int, budget: int) -> None:
    """Make room for ``positions`` tokens plus a tree of ``budget`` nodes padded to its bucket: a static
    cache grows (rarely, see `TreeStaticCache.reserve`); a dynamic one grows by itself."""
    if isinstance(cache, TreeStaticCache):
        cache.reserve(positions + bucket_of(budget))


def selection(cache) -> torch.Tensor | None:
    """The device's greedy choice for the tree step in a static cache's tail (LongTensor[2]: best node,
    bonus; `specbench.verify.greedy_select`), or None (a dynamic cache: the rule reads the logits)."""
    return cache.selection if isinstance(cache, TreeStaticCache) else None


@torch.inference_mode()  # the cache tensors come from inference-mode forwards; update them in kind
def commit_path(cache: DynamicCache, past_len: int, path: list[int], n_nodes: int) -> None:
    """Keep the K/V of tree nodes ``path`` (node indices, root first) and drop the other of the
    ``n_nodes`` tree slots.

    Fast paths: when the path is a prefix of node order (always for vanilla and chains) the slots are
    already in place and only the tail is cut; when it is every node, nothing changes.
    """
    if isinstance(cache, TreeStaticCache):
        cache.commit(past_len, path, n_nodes)
        return
    kept = len(path)
    in_place = path == list(range(kept))
    if in_place and kept == n_nodes:
        return
    index = None if in_place else torch.tensor(path, dtype=torch.long) + past_len  # [kept]
    if index is not None:
        for layer in cache.layers:
            if layer.keys is None or layer.keys.numel() == 0:
                continue
            keys, values = layer.keys, layer.values  # [B, kv_heads, past + n, head_dim]
            index = index.to(keys.device)
            keys[:, :, past_len : past_len + kept] = keys.index_select(2, index)
            values[:, :, past_len : past_len + kept] = values.index_select(2, index)
    crop(cache, past_len + kept)


@torch.inference_mode()
def crop(cache: DynamicCache, length: int) -> None:
    """Drop every position from ``length`` on (a draft model rolling back to the accepted prefix)."""
    for layer in cache.layers:
        if layer.keys is None or layer.keys.numel() == 0:
            continue
        layer.keys = layer.keys[:, :, :length]
        layer.values = layer.values[:, :, :length]
