"""The batched KV cache: one preallocated transformers `StaticCache` whose B rows each decode their own sequence.

Layout: every layer holds keys / values of shape [B, kv_heads, capacity, head_dim], allocated once. Row b's
committed prefix is slots ``[0, lengths[b])``; a tree step writes row b's padded tree (`static_cache.pad_tree`,
one bucket for all rows) into its own scratch tail ``[lengths[b], lengths[b] + T)``; commit moves each row's
accepted path to ``[lengths[b], lengths[b] + kept)`` with one gather and one scatter per layer tensor and adds
``kept`` to ``lengths[b]``. Slots at or beyond a row's length hold stale rows that the 4D mask hides
(`tree_mask`), as do all of the other rows' slots: attention is per batch row, so row b never sees row c.

**Active width.** A forward attends over the first ``width`` slots of every row, not the whole capacity: the eager
regime sets it per step to the longest row's length plus the tree, rounded up to `WIDTH_STEP` (`set_width`), so a
step costs what its sequences hold, not what the longest prompt of the run would need; the compiled regime keeps
``width = capacity`` (one shape per graph). Slots beyond a row's length are masked either way, so the width changes
the cost, never the result.

Why not `TreeStaticCache` with a batch dimension: its one shared 0-d length is the compiled graphs' input; the
batched cache needs one length per row. The two share the tree packing (`pad_tree`) and the bucket rule.
"""

from __future__ import annotations

import torch
from transformers import StaticCache
from transformers.cache_utils import Cache, StaticLayer

from specbench.static_cache import CAPACITY_STEP

#: the eager regime's attention width is the longest row plus the tree, rounded up to a multiple of this
WIDTH_STEP = 64


class RowLayer(StaticLayer):
    """A `StaticLayer` of B rows whose write slots are per row: the cache's ``slots`` LongTensor[B, T], set
    before each forward (a tree step: ``lengths[b] + arange(T)``)."""

    def __init__(self, cache: "BatchTreeCache", capacity: int) -> None:
        super().__init__(max_cache_len=capacity)
        self.cache = cache
        self.device = cache.device
        self.batch_size, self.num_heads = cache.rows, cache.kv_heads
        self.k_head_dim = self.v_head_dim = cache.head_dim
        shape = (cache.rows, cache.kv_heads, capacity, cache.head_dim)
        self.keys = torch.zeros(shape, dtype=cache.dtype, device=cache.device)
        self.values = torch.zeros(shape, dtype=cache.dtype, device=cache.device)
        # static addresses: a compiled step writes into them in place, which CUDA graphs allow only for inputs
        # marked static (an unmarked mutated input makes torch skip the graph and run the step uncaptured)
        torch._dynamo.mark_static_address(self.keys)
        torch._dynamo.mark_static_address(self.values)
        self.is_initialized = True

    def get_seq_length(self) -> int:
        return 0  # positions and masks are always given explicitly; no caller may derive them from a length

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        # key_states [B, kv_heads, T, head_dim] -> slots[b, t] of row b
        slots = self.cache.slots  # [B, T]
        rows = torch.arange(slots.shape[0], device=slots.device)[:, None]  # [B, 1]
        self.keys[rows, :, slots] = key_states.transpose(1, 2)  # indexed view: [B, T, kv_heads, head_dim]
        self.values[rows, :, slots] = value_states.transpose(1, 2)
        width = self.cache.width
        return self.keys[:, :, :width], self.values[:, :, :width]  # [B, kv_heads, width, head_dim]


class BatchTreeCache(StaticCache):
    """B sequences in one static cache: per-row committed ``lengths`` and per-row scratch tails."""

    def __init__(self, config, rows: int, capacity: int, device, dtype) -> None:
        text = config.get_text_config(decoder=True)
        heads = text.num_attention_heads
        self.kv_heads = getattr(text, "num_key_value_heads", None) or heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        self.device, self.dtype, self.rows = torch.device(device), dtype, rows
        self.num_layers = text.num_hidden_layers
        self.capacity = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
        Cache.__init__(self, layers=[RowLayer(self, self.capacity) for _ in range(self.num_layers)])
        self.lengths = torch.zeros(rows, dtype=torch.long, device=self.device)  # [B] committed per row
        torch._dynamo.mark_static_address(self.lengths)
        self.slots = torch.zeros(rows, 1, dtype=torch.long, device=self.device)  # [B, T] where a forward writes
        self._slots: dict[int, torch.Tensor] = {}  # T -> the step's write slots, one static buffer per bucket
        self.all_columns = torch.arange(self.capacity, device=self.device)  # [capacity]
        self.width = self.capacity  # slots a forward attends over (`set_width`)

    @property
    def columns(self) -> torch.Tensor:
        """LongTensor[S] the slots a forward attends over, S = ``width``."""
        return self.all_columns[: self.width]

    def set_width(self, needed: int | None) -> None:
        """Attend over ``needed`` slots rounded up to `WIDTH_STEP` (at most the capacity); None: the whole capacity."""
        self.width = self.capacity if needed is None else min(self.capacity, -(-needed // WIDTH_STEP) * WIDTH_STEP)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def set_slots(self, bucket: int) -> None:
        """A step of ``bucket`` nodes per row writes row b at ``lengths[b] + arange(bucket)``: ``slots`` [B, T],
        filled in place in the bucket's own buffer (a fixed address for a captured step)."""
        if bucket not in self._slots:
            self._slots[bucket] = torch.zeros(self.rows, bucket, dtype=torch.long, device=self.device)
            torch._dynamo.mark_static_address(self._slots[bucket])
        self.slots = self._slots[bucket]
        self.slots.copy_(self.lengths[:, None] + torch.arange(bucket, device=self.device)[None, :])

    def clear_row(self, row: int) -> None:
        """Row ``row`` holds nothing (a new sequence joins it). Its stale slots stay, hidden by the masks."""
        self.lengths[row] = 0

    def write_row(self, row: int, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Row ``row``'s committed prefix set from per-layer (keys, values) Tensor[1, kv_heads, L, head_dim]
        (a batch-1 prefill's cache), its length set to L."""
        length = layers[0][0].shape[2]
        if length > self.capacity:
            raise ValueError(f"a prompt of {length} positions does not fit the batch cache's {self.capacity}")
        for layer, (keys, values) in zip(self.layers, layers):
            layer.keys[row, :, :length] = keys[0]
            layer.values[row, :, :length] = values[0]
        self.lengths[row] = length

    def commit(self, orders: torch.Tensor, kept: torch.Tensor) -> None:
        """Every row's accepted path moved into place and its length advanced.

        orders: LongTensor[B, T]: per row the tree slots in their new order, the accepted path first (a row
                that keeps nothing: ``arange(T)``, a no-op move)
        kept:   LongTensor[B]: how many of them each row keeps
        """
        rows = torch.arange(self.rows, device=self.device)[:, None]  # [B, 1]
        base = self.lengths[:, None]  # [B, 1]
        source = base + orders  # [B, T]
        target = base + torch.arange(orders.shape[1], device=self.device)[None, :]  # [B, T]
        for layer in self.layers:
            for tensor in (layer.keys, layer.values):
                tensor[rows, :, target] = tensor[rows, :, source]  # [B, T, kv_heads, head_dim]
        self.lengths += kept
