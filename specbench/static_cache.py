"""The compiled regime's KV cache: transformers' `StaticCache`, preallocated, with a scratch tail for trees.

Layout: every layer holds keys / values of shape [1, kv_heads, capacity, head_dim], allocated once (capacity
= prompt + max new tokens + the largest tree bucket, rounded up to `CAPACITY_STEP`, at least `MIN_CAPACITY`
by default) and grown only when a turn needs more. Slots ``[0, past)`` hold the committed prefix; a tree
step writes its nodes (padded to the bucket, see `pad_tree`) into the scratch tail ``[past, past + B)``;
commit moves the accepted path's slots to ``[past, past + kept)`` on the device and sets the length to
``past + kept``. Nothing is ever reallocated between steps or turns, so compiled graphs see the same
tensors every time.

All layers share one 0-d device tensor ``length`` (StaticLayer's ``cumulative_length``): a layer writes at
``length + arange(rows)`` and never advances it; the cache sets it once per step after commit (one device
op, not one per layer). Slots at or beyond ``length`` hold stale rows that the 4D masks hide.

Trees are padded to buckets (`BUCKETS`) so at most one graph per bucket is compiled. A padding node is a
child of the root in the node list with ``valid`` False: no real node has it among its ancestors (so no real
node attends to it) and the acceptance rule (`specbench.verify.greedy_select`) never accepts it.
"""

from __future__ import annotations

import torch
from transformers import StaticCache
from transformers.cache_utils import Cache, StaticLayer

#: tree sizes the verify forward is compiled for; a tree is padded to the smallest bucket holding it
#: (beyond 64 nodes: the next power of two)
BUCKETS = (1, 2, 4, 8, 16, 32, 64)
#: the static cache's length is a multiple of this, so a growing prompt rarely changes the compiled shapes
CAPACITY_STEP = 512
#: the smallest capacity a target allocates by default (MT-bench turns with 128 new tokens fit)
MIN_CAPACITY = 2048
#: columns of a packed tree row before its ancestor row: token, parent, depth, valid
PACKED_FIELDS = 4


def bucket_of(n: int) -> int:
    """The number of nodes a tree of ``n`` nodes is padded to."""
    if n < 1:
        raise ValueError("a tree has at least its root")
    for size in BUCKETS:
        if n <= size:
            return size
    return 1 << (n - 1).bit_length()


def pad_tree(tree, bucket: int) -> torch.Tensor:
    """The tree padded to ``bucket`` nodes, packed as LongTensor[bucket, 4 + bucket] (host): per node its
    token, parent (padding: the root), depth (padding: 0), valid (1 for real nodes, 0 for padding), then
    its ancestor-or-self row (padding: itself only, so padding rows attend to the prefix and themselves,
    and no real row has a padding column set)."""
    n = len(tree)
    if bucket < n:
        raise ValueError(f"a tree of {n} nodes does not fit bucket {bucket}")
    packed = torch.zeros(bucket, PACKED_FIELDS + bucket, dtype=torch.long)
    packed[:, 0] = int(tree.tokens[0])  # padding repeats the root's token (any id would do)
    packed[:n, 0] = tree.tokens
    packed[:n, 1] = tree.parents
    packed[:n, 2] = torch.tensor(tree.depths(), dtype=torch.long)
    packed[:n, 3] = 1
    ancestors = packed[:, PACKED_FIELDS:]
    ancestors[:n, :n] = tree.ancestor_mask()
    pad = torch.arange(n, bucket)
    ancestors[pad, pad] = 1
    return packed


def unpack_tree(packed: torch.Tensor):
    """(tokens Long[B], parents Long[B], depths Long[B], valid Bool[B], ancestors Bool[B, B]) of a packed tree."""
    return (packed[:, 0], packed[:, 1], packed[:, 2], packed[:, 3].bool(), packed[:, PACKED_FIELDS:].bool())


class TreeLayer(StaticLayer):
    """A `StaticLayer` allocated up front whose write position is the cache's shared ``length``: it writes
    ``rows`` new keys/values at ``length + arange(rows)`` and leaves ``length`` to the cache."""

    def __init__(self, capacity: int, length: torch.Tensor, kv_heads: int, head_dim: int, device, dtype) -> None:
        super().__init__(max_cache_len=capacity)
        self.cumulative_length = length
        self.device = device
        self.batch_size, self.num_heads, self.k_head_dim, self.v_head_dim = 1, kv_heads, head_dim, head_dim
        self.keys = torch.zeros(1, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros(1, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        torch._dynamo.mark_static_address(self.keys)
        torch._dynamo.mark_static_address(self.values)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        slots = self.cumulative_length + torch.arange(key_states.shape[-2], device=self.device)
        self.keys.index_copy_(2, slots, key_states)
        self.values.index_copy_(2, slots, value_states)
        return self.keys, self.values


def move_slots(cache: TreeStaticCache, order: torch.Tensor, past: torch.Tensor) -> None:
    """Slots ``past + order`` (LongTensor[B]: the accepted path first) copied to ``past + arange(B)`` in every
    layer of ``cache``. Fixed shapes per bucket, so the compiled regime runs it as one graph (no host loop over
    layers). The cache itself is the argument, not lists of its tensors: a graphed call is keyed by the cache's
    identity and capacity, not by every layer's address read afresh per commit (`specbench.cuda_graphs`)."""
    source = past + order
    target = past + torch.arange(order.shape[0], device=order.device)
    for layer in cache.layers:
        for tensor in (layer.keys, layer.values):
            tensor.index_copy_(2, target, tensor.index_select(2, source))


class TreeStaticCache(StaticCache):
    """transformers' `StaticCache` with `TreeLayer`s (full-length layers for every layer type: sliding
    windows come from the masks, as in the eager regime) and the tree step's device buffers."""

    def __init__(self, config, capacity: int, device, dtype, compile_commit=None) -> None:
        text = config.get_text_config(decoder=True)
        heads = text.num_attention_heads
        self.kv_heads = getattr(text, "num_key_value_heads", None) or heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        self.device, self.dtype = torch.device(device), dtype
        self.length = torch.zeros((), dtype=torch.long, device=self.device)
        torch._dynamo.mark_static_address(self.length)
        self.num_layers = text.num_hidden_layers
        Cache.__init__(self, layers=self._layers(capacity))
        self.capacity = capacity
        self.columns = torch.arange(capacity, device=self.device)  # [S]
        self.past = 0  # committed positions (host mirror of ``length``)
        self.bucket: int | None = None  # the bucket of the step whose slots are in the tail
        self.selection: torch.Tensor | None = None  # that step's greedy choice on the device (best node, bonus)
        self.inputs: dict[int, torch.Tensor] = {}  # bucket -> packed tree buffer on the device
        self.orders: dict[int, torch.Tensor] = {}  # bucket -> commit order buffer on the device
        self.compile_commit = compile_commit  # None: eager; else a wrapper that compiles `move_slots`
        self._movers: dict[int, object] = {}

    def _layers(self, capacity: int) -> list[TreeLayer]:
        return [TreeLayer(capacity, self.length, self.kv_heads, self.head_dim, self.device, self.dtype)
                for _ in range(self.num_layers)]

    def reserve(self, needed: int) -> None:
        """Hold at least ``needed`` positions: reallocated (and so recompiled) only when it grows."""
        if needed <= self.capacity:
            return
        capacity = -(-needed // CAPACITY_STEP) * CAPACITY_STEP
        old = self.layers
        self.layers = self._layers(capacity)
        for new, layer in zip(self.layers, old):
            new.keys[:, :, : self.capacity] = layer.keys
            new.values[:, :, : self.capacity] = layer.values
        self.capacity = capacity
        self.columns = torch.arange(capacity, device=self.device)

    def restart(self) -> None:
        """Empty (a new sequence): length 0, nothing pending. The storage is kept."""
        self.set_length(0)
        self.bucket, self.selection = None, None

    def set_length(self, length: int) -> None:
        self.past = length
        self.length.fill_(length)

    def input_buffer(self, bucket: int) -> torch.Tensor:
        if bucket not in self.inputs:
            self.inputs[bucket] = torch.zeros(bucket, PACKED_FIELDS + bucket, dtype=torch.long, device=self.device)
            self.orders[bucket] = torch.zeros(bucket, dtype=torch.long, device=self.device)
            torch._dynamo.mark_static_address(self.inputs[bucket])
            torch._dynamo.mark_static_address(self.orders[bucket])
        return self.inputs[bucket]

    def commit(self, past: int, path: list[int], n_nodes: int) -> None:
        """`specbench.kv.commit_path` for this cache: the path's slots to ``[past, past + kept)``, length set."""
        if past != self.past:
            raise ValueError(f"static cache holds {self.past} committed positions, commit was given {past}")
        kept = len(path)
        if path != list(range(kept)):
            bucket = self.bucket
            if bucket is None or bucket < n_nodes:
                raise ValueError("commit without a tree step in the cache's tail")
            chosen = set(path)
            order = torch.tensor(path + [i for i in range(bucket) if i not in chosen], dtype=torch.long)
            self.input_buffer(bucket)  # allocates the bucket's buffers if no step has yet
            self.orders[bucket].copy_(order)
            self._mover(bucket)(self, self.orders[bucket], self.length)
        self.set_length(past + kept)
        self.bucket, self.selection = None, None

    def _mover(self, bucket: int):
        if bucket not in self._movers:
            self._movers[bucket] = (move_slots if self.compile_commit is None
                                    else self.compile_commit(move_slots, f"commit, bucket {bucket}"))
        return self._movers[bucket]

    def committed(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys, values) of the committed prefix, Tensor[1, kv_heads, past, head_dim] views."""
        return [(layer.keys[:, :, : self.past], layer.values[:, :, : self.past]) for layer in self.layers]
