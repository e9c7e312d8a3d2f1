"""The target model: loading (local directory, GGUF file, or the embedded default) and the two forwards
the harness needs: prefill over a prompt and one tree-verification step.

Tree verification uses transformers' custom 4D attention mask ``[1, 1, n, past + n]`` (prefix columns
visible, tree block = ancestor mask) with explicit ``position_ids = past + depth(node)``; no modeling
file is forked. Logits are computed with the target's own ``lm_head`` on the rows that need them.

Regimes (`TargetModel.use_regime`): ``eager`` (the default) runs those forwards on a transformers
``DynamicCache``; ``compiled`` runs them on a preallocated `specbench.static_cache.TreeStaticCache`, the
tree step padded to its bucket and compiled once per bucket with ``torch.compile`` (inductor; on CUDA each
fixed-shape step is then replayed as a CUDA graph captured by hand, `specbench.cuda_graphs`), greedy acceptance
included (`specbench.verify.greedy_select`).
"""

from __future__ import annotations

import sys
import time

import torch

from specbench import batch_cache, kv, static_cache
from specbench.attention import attention_of, chosen_attention, use_attention
from specbench.cuda_graphs import GraphedFunction, cuda_capture, replay_capture
from specbench.drafter import TargetHandle
from specbench.errors import SpecbenchError
from specbench.layer_tap import LayerTap
from specbench.linear import chosen_kernel, use_kernel
from specbench.model_source import DEFAULT_MODEL, GEMMA3_TURNS, ModelSource, converted_copy, resolve_model, weights_fingerprint
from specbench.placement import check_device_map, placement_plan
from specbench.settings import COMPILE_BACKENDS, DTYPE_NAMES, REGIMES
from specbench.tree import DraftTree
from specbench.verify import greedy_select

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


class TargetModel:
    """A Hugging Face causal LM wrapped for tree verification.

    The harness owns the KV cache; this class only runs forwards against it.
    """

    def __init__(self, model, tokenizer, source: ModelSource | None = None) -> None:
        model.eval()
        self.model = model
        self.tokenizer = tokenizer
        self.source = source
        self.decoder = model.base_model  # the transformer body: returns normed last hidden states
        self.cache_keyword = kv.cache_keyword(self.decoder)  # "cache" or "past_key_values" (the transformers version)
        self.lm_head = model.get_output_embeddings()
        self.device = model.get_input_embeddings().weight.device  # the primary device when spread over GPUs
        self.dtype = next(model.parameters()).dtype
        self.config = model.config
        self.linear_kernel = chosen_kernel(self.device, self.dtype)  # specbench.linear: the same for every drafter
        use_kernel(model, self.linear_kernel)
        use_attention(model, chosen_attention(self.device))  # specbench.attention: a tree's keys read in place
        self.handle = TargetHandle(
            embed_tokens=model.get_input_embeddings(),
            lm_head=self.lm_head,
            config=model.config,
            device=self.device,
            dtype=self.dtype,
            name=source.name if source else str(getattr(model.config, "name_or_path", "") or type(model).__name__),
            sha256=source.sha256 if source else None,
            fingerprint=weights_fingerprint(model),
            model=model,
            tokenizer=tokenizer,
            taps=LayerTap(model),
        )
        self.eos_ids = _eos_ids(model, tokenizer)
        windows = getattr(self.config, "layer_types", None) or []
        self.sliding_window = getattr(self.config, "sliding_window", None) if "sliding_attention" in windows else None
        self._min = torch.finfo(self.dtype).min
        self.regime = "eager"
        self.compile = False  # compiled regime: torch.compile the bucket steps (False: the same code, eager)
        self.backend = "inductor"  # the compiled regime's torch.compile backend (`COMPILE_BACKENDS`)
        self.compile_seconds: dict[str, float] = {}  # what each compiled function's first call cost
        self.min_capacity = static_cache.MIN_CAPACITY
        self._static: static_cache.TreeStaticCache | None = None
        self._steps: dict[int, object] = {}  # bucket -> the (compiled) static tree step
        self._batch_caches: dict[int, batch_cache.BatchTreeCache] = {}  # compiled regime: batch size -> its cache
        self._batch_steps: dict[tuple[int, int], object] = {}  # (batch size, bucket) -> the (compiled) batch step

    @property
    def attention_kernel(self) -> str:
        """The attention kernel the model runs on now (`specbench.attention`), read from the model itself."""
        return attention_of(self.model)

    @property
    def name(self) -> str:
        return self.handle.name

    def check_new_tokens(self, max_new_tokens: int) -> None:
        """Refuse (one line) ``max_new_tokens`` that cannot fit the model's context window
        (``max_position_embeddings``) even after an empty prompt: positions past it are ones the model was never
        trained at, and a batch cache sized for them would not fit in memory. A prompt plus its answer that run
        past the window within a turn is the model's limit, as in transformers' ``generate()``."""
        window = getattr(self.config, "max_position_embeddings", None)
        if isinstance(window, int) and max_new_tokens >= window:
            raise SpecbenchError(f"--max-new-tokens {max_new_tokens} does not fit {self.name}'s context window of "
                                 f"{window} positions; give fewer than {window}")

    def use_regime(self, regime: str, compile: bool = True, min_capacity: int | None = None,
                   backend: str = "inductor") -> None:
        """``eager``: dynamic cache, eager forwards (the default). ``compiled``: static cache and per-bucket
        compiled tree steps (``compile=False`` runs the same static code eagerly, for tests), through
        ``backend`` (`COMPILE_BACKENDS`)."""
        if regime not in REGIMES:
            raise SpecbenchError(f"--regime must be one of {', '.join(REGIMES)}, got {regime!r}")
        if backend not in COMPILE_BACKENDS:
            raise SpecbenchError(f"--compile-backend must be one of {', '.join(COMPILE_BACKENDS)}, got {backend!r}")
        self.regime, self.backend = regime, backend
        self.compile = regime == "compiled" and compile
        if min_capacity is not None:
            self.min_capacity = min_capacity
        self._static, self._steps = None, {}
        self._batch_caches, self._batch_steps = {}, {}
        self.compile_seconds: dict[str, float] = {}  # what each compiled function's first call cost
        if self.compile:
            import torch._dynamo

            # one graph per bucket (and per cache capacity) of the same code: more than dynamo's default 8
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            self._graph_pool = None  # the captured steps' memory pool on a GPU, shared (one graph replays at a time)

    def regime_record(self) -> dict:
        """What the manifest records about the regime."""
        record = {"name": self.regime}
        if self.regime == "compiled":
            record |= {"compiled": self.compile, "backend": self.backend, "mode": self._compile_mode(),
                       "buckets": list(static_cache.BUCKETS), "min_capacity": self.min_capacity,
                       "cache": "specbench.static_cache.TreeStaticCache (transformers StaticCache)"}
        return record

    def drafter_eager_reason(self, drafter) -> str | None:
        """Why ``drafter``'s own forwards run eagerly in this regime (what the manifest says), or None where
        `prepare_drafter` compiles them."""
        if not self.compile:
            return "the eager regime"
        if not getattr(drafter, "capturable", False):
            return "not capturable (Drafter.capturable is False): its forwards run eagerly"
        if self.backend == "cudagraphs":  # it captures fixed shapes only; a drafter's shapes change every frontier
            return "the cudagraphs backend captures the target's fixed-shape steps only"
        return None

    def prepare_drafter(self, drafter) -> list[str] | None:
        """After ``drafter.reset``: in the compiled regime, compile a capturable drafter's per-step forwards
        (`Drafter.compile_parts`) once for its loaded weights. Their names, or None where it runs eagerly
        (`drafter_eager_reason`)."""
        if self.drafter_eager_reason(drafter) is not None:
            return None
        if getattr(drafter, "compiled_parts", None) is None:  # a drafter clears it when it loads new weights
            drafter.compiled_parts = list(drafter.compile_parts(self._compiled_part))
        return drafter.compiled_parts

    def _compiled_part(self, function):
        """A drafter's forward compiled with shapes symbolic from the start: a part's shapes change with every
        frontier, and specialising the first one would cost one more compilation per part (on a GPU, tens of
        seconds of a short lease each); the graphs per drafter stay bounded."""
        return self._compile(function, dynamic=True, label=f"drafter part {getattr(function, '__qualname__', 'forward')}")

    def _compile_mode(self) -> str:
        """What the manifest calls the compiled regime's kernels and how they launch."""
        if self.backend == "cudagraphs":
            return "eager kernels in CUDA graphs"
        return "fused kernels in CUDA graphs" if self.device.type == "cuda" else "default"

    def _compiled(self, function, label: str = "commit"):
        """``function`` compiled for fixed shapes (one graph per bucket); itself when the regime compiles nothing."""
        return self._compile(function, dynamic=False, label=label) if self.compile else function

    def _graph_capture(self):
        """How fixed-shape steps are captured: CUDA graphs from one pool on a GPU, `replay_capture` elsewhere."""
        if self.device.type != "cuda":
            return replay_capture
        if self._graph_pool is None:
            self._graph_pool = torch.cuda.graph_pool_handle()
        return cuda_capture(self.device, self._graph_pool)

    def _compile(self, function, dynamic: bool, label: str):
        """``function`` through the regime's backend. Its first call, where compilation happens, is timed:
        ``compile_seconds[label]`` (the manifest of a compiled run records them) and one line on stderr, so a
        slow warm-up says what it spent. On a GPU the outputs are copied out of the CUDA graph's buffers, which
        its next replay overwrites while a caller still holds them (a drafter's cache, the step's hidden states)."""
        on_gpu = self.device.type == "cuda"
        if self.backend == "cudagraphs":
            compiled = function  # the eager kernels, captured below
        else:  # a drafter's part (shapes change every frontier) has inductor's own CUDA graphs, one per shape
            compiled = torch.compile(function, dynamic=dynamic, mode="reduce-overhead" if on_gpu and dynamic else None)
        if self.backend == "cudagraphs" or (on_gpu and not dynamic):
            # fixed shapes replayed as one CUDA graph each, captured by hand (`specbench.cuda_graphs`), for both backends:
            # a replay skips dynamo's guards, and a step that writes the static cache in place is captured whatever
            # torch's rules for mutated inputs (torch.compile's own cudagraphs backend ran exactly those eagerly)
            compiled = GraphedFunction(compiled, label, self._graph_capture())
        first = True
        copy_out = on_gpu or self.backend == "cudagraphs"  # a graph's outputs are its own buffers

        def run(*args, **kwargs):
            nonlocal first
            start = time.perf_counter() if first else 0.0
            out = compiled(*args, **kwargs)
            if copy_out:
                out = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, out)
            if first:
                if on_gpu:
                    torch.cuda.synchronize(self.device)
                first, seconds = False, time.perf_counter() - start
                self.compile_seconds[label] = round(self.compile_seconds.get(label, 0.0) + seconds, 2)
                print(f"specbench: compiled {label} in {seconds:.1f} s", file=sys.stderr)
            return out

        return run

    def new_cache(self):
        """A fresh dynamic cache (eager), or the target's one static cache emptied (compiled: preallocated
        once and reused for every sequence, so compiled graphs keep seeing the same tensors)."""
        if self.regime == "eager":
            return kv.new_cache()
        if self._static is None:
            # the commit is compiled where launches cost (a GPU: one graph instead of 2 x layers copies); on a CPU
            # the same function runs eagerly (compiling it bought nothing there and doubles compile time)
            commit = self._compiled if self.compile and self.device.type == "cuda" else None
            self._static = static_cache.TreeStaticCache(self.config, self.min_capacity, self.device, self.dtype,
                                                        compile_commit=commit)
        self._static.restart()
        return self._static

    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the prompt through the target, filling ``cache``.

        input_ids: LongTensor[L]
        returns:   logits Tensor[V] at the last position, hidden Tensor[L, H]
        """
        if isinstance(cache, static_cache.TreeStaticCache):
            logits, hidden = self._static_prefill(input_ids, cache)
        else:
            out = self.decoder(input_ids=input_ids.to(self.device)[None], **{self.cache_keyword: cache},
                               use_cache=True)
            hidden = out.last_hidden_state[0]  # [L, H]
            logits = self.lm_head(hidden[-1])
        self.handle.taps.mark("prefill")  # a drafter reading layer taps finds its prompt's forward by this
        return logits, hidden

    @torch.inference_mode()
    def forward_tree(self, tree: DraftTree, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Score every node of ``tree`` against the cached prefix; appends n slots to ``cache``.

        returns: logits Tensor[n, V], hidden Tensor[n, H]
        """
        if isinstance(cache, static_cache.TreeStaticCache):
            return self._static_tree(tree, cache)  # numbers and marks the step's taps itself
        past = kv.cached_length(cache)
        n = len(tree)
        tokens = tree.tokens.to(self.device)[None]  # [1, n]
        if n == 1:
            positions = torch.tensor([[past]], device=self.device)
            mask = None
        else:
            depths = tree.depths()
            positions = torch.tensor([[past + d for d in depths]], device=self.device)  # [1, n]
            mask = self._tree_mask(tree, past, depths)
        out = self.decoder(
            input_ids=tokens, position_ids=positions, attention_mask=mask, **{self.cache_keyword: cache},
            use_cache=True,
        )
        hidden = out.last_hidden_state[0]  # [n, H]
        self.handle.taps.mark("step")
        return self.lm_head(hidden), hidden

    def _tree_mask(self, tree: DraftTree, past: int, depths: list[int]):
        """Additive mask Tensor[1, 1, n, past + n]: 0 where visible, dtype-min where hidden.

        Sliding-window models get a second mask for their windowed layers (query at position q sees
        keys at positions > q - window), passed per layer type.
        """
        n = len(tree)
        visible = torch.ones(n, past + n, dtype=torch.bool)
        visible[:, past:] = tree.ancestor_mask()
        full = self._additive(visible)
        if self.sliding_window is None:
            return full
        query_pos = torch.tensor([past + d for d in depths])[:, None]  # [n, 1]
        key_pos = torch.cat([torch.arange(past), query_pos[:, 0]])[None, :]  # [1, past + n]
        windowed = visible & (query_pos - key_pos < self.sliding_window)
        return {"full_attention": full, "sliding_attention": self._additive(windowed)}

    # ---- batches: B sequences in one `specbench.batch_cache.BatchTreeCache` ------------------------------
    def new_batch_cache(self, rows: int, capacity: int) -> batch_cache.BatchTreeCache:
        """A batch cache of ``rows`` sequences of up to ``capacity`` positions each (tree tail included). In the
        compiled regime one cache per batch size, at least ``min_capacity`` long, reused while it is long
        enough: the compiled steps see the same shapes (and, on a GPU, the same tensors) every batch pass."""
        if self.regime == "eager":
            return batch_cache.BatchTreeCache(self.config, rows, capacity, self.device, self.dtype)
        cache = self._batch_caches.get(rows)
        if cache is None or cache.capacity < capacity:
            cache = batch_cache.BatchTreeCache(self.config, rows, max(capacity, self.min_capacity), self.device,
                                               self.dtype)
            self._batch_caches[rows] = cache
        return cache

    @torch.inference_mode()
    def prefill_row(self, input_ids: torch.Tensor, cache: batch_cache.BatchTreeCache, row: int):
        """`prefill` of one sequence into row ``row`` of a batch cache: the batch-1 eager prefill (so the root
        and hidden states are exactly batch 1's), its keys / values copied into the row.

        returns: logits Tensor[V] at the last position, hidden Tensor[L, H]
        """
        single = kv.new_cache()
        logits, hidden = self.prefill(input_ids, single)
        cache.write_row(row, [(layer.keys, layer.values) for layer in single.layers])
        return logits, hidden

    @torch.inference_mode()
    def forward_trees(self, trees: list[DraftTree | None], cache: batch_cache.BatchTreeCache):
        """Score row b's tree (``trees[b]``; None: an idle row, scored as a root-only tree and never
        committed) against row b's prefix, every tree padded to the bucket of the largest; writes each
        row's padded tree into its scratch tail.

        returns: logits Tensor[B, T, V], hidden Tensor[B, T, H] (rows of padding nodes included)
        """
        sizes = [len(tree) if tree is not None else 1 for tree in trees]
        bucket = static_cache.bucket_of(max(sizes))
        packed = torch.stack([static_cache.pad_tree(tree if tree is not None else DraftTree.root_only(0), bucket)
                              for tree in trees]).to(self.device)  # [B, T, 4 + T]
        longest = int(cache.lengths.max())
        if longest + bucket > cache.capacity:
            raise ValueError(f"batch cache of {cache.capacity} positions cannot hold a {bucket}-node tree step")
        cache.set_slots(bucket)  # [B, T] write slots
        # eager: attend over what the rows hold (`BatchTreeCache.set_width`); compiled: the whole capacity, one shape
        cache.set_width(None if self.regime == "compiled" else longest + bucket)
        key = (len(trees), bucket)
        if key not in self._batch_steps:  # compiled regime: one graph per (batch size, bucket); eager: the function
            self._batch_steps[key] = (self._compiled(self._batch_step, f"batch {len(trees)} step, bucket {bucket}")
                                      if self.regime == "compiled" else self._batch_step)
        with self.handle.taps.unnumbered():
            logits, hidden, tapped = self._batch_steps[key](packed, cache)
        self.handle.taps.record(tapped, "step")  # row b's layer taps are batch row b of this forward
        return logits, hidden

    def _batch_step(self, packed: torch.Tensor, cache: batch_cache.BatchTreeCache):
        """`forward_trees`' device part (what the compiled regime compiles): masks and positions from the packed
        trees [B, T, 4 + T] and the rows' lengths, the forward into the scratch tails, logits."""
        tokens, depths = packed[:, :, 0], packed[:, :, 2]  # [B, T] each
        bucket = tokens.shape[1]
        ancestors = packed[:, :, static_cache.PACKED_FIELDS:].bool()  # [B, T, T]
        past, columns = cache.lengths, cache.columns  # [B], [S]
        offset = columns[None, :] - past[:, None]  # [B, S]: the tree slot a column holds, when in [0, T)
        in_tree = (offset >= 0) & (offset < bucket)
        slot = offset.clamp(0, bucket - 1)  # [B, S]
        seen = torch.gather(ancestors, 2, slot[:, None, :].expand(-1, bucket, -1))  # [B, T, S]
        visible = (columns[None, :] < past[:, None])[:, None, :] | (seen & in_tree[:, None, :])  # [B, T, S]
        positions = past[:, None] + depths  # [B, T]
        key_positions = torch.where(in_tree, past[:, None] + torch.gather(depths, 1, slot), columns[None, :])  # [B, S]
        mask = self._additive_on_device(visible)[0].transpose(0, 1)  # [B, 1, T, S]
        if self.sliding_window is not None:
            windowed = visible & (positions[:, :, None] - key_positions[:, None, :] < self.sliding_window)
            mask = {"full_attention": mask, "sliding_attention": self._additive_on_device(windowed)[0].transpose(0, 1)}
        out = self.decoder(input_ids=tokens, position_ids=positions, attention_mask=mask,
                           **{self.cache_keyword: cache}, use_cache=True)
        hidden = out.last_hidden_state  # [B, T, H]
        return self.lm_head(hidden), hidden, self.handle.taps.latest()

    # ---- the compiled regime: static cache, padded trees -------------------------------------------------
    def _static_prefill(self, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefill into a static cache (eager: prompts vary in length), with an explicit causal mask."""
        length = len(input_ids)
        cache.reserve(length + 1)
        cache.set_length(0)
        positions = torch.arange(length, device=self.device)
        mask = self._static_mask(positions[:, None] >= cache.columns[None, :], positions, cache.columns)
        out = self.decoder(input_ids=input_ids.to(self.device)[None], position_ids=positions[None],
                           attention_mask=mask, **{self.cache_keyword: cache}, use_cache=True)
        cache.set_length(length)
        hidden = out.last_hidden_state[0]  # [L, H]
        return self.lm_head(hidden[-1]), hidden

    def _static_tree(self, tree: DraftTree, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward_tree` on a static cache: the tree padded to its bucket, copied into the bucket's device
        buffer (one host-to-device copy), and the bucket's step run; the rows of the real nodes returned."""
        n = len(tree)
        bucket = static_cache.bucket_of(n)
        if cache.past + bucket > cache.capacity:
            raise ValueError(f"static cache of {cache.capacity} positions cannot hold {cache.past} + a {bucket}-node tree")
        packed = cache.input_buffer(bucket)
        packed.copy_(static_cache.pad_tree(tree, bucket))
        if bucket not in self._steps:
            self._steps[bucket] = self._compiled(self._static_step, f"tree step, bucket {bucket}")
        with self.handle.taps.unnumbered():
            logits, hidden, selection, tapped = self._steps[bucket](packed, cache)
        self.handle.taps.record(tapped, "step")
        cache.bucket, cache.selection = bucket, selection
        return logits[:n], hidden[:n]

    def _static_step(self, packed: torch.Tensor, cache):
        """One padded tree step (what is compiled): mask, positions and write slots from the cache's length,
        the forward into the scratch tail, logits, and the greedy choice (`greedy_select`)."""
        tokens, parents, depths, valid, ancestors = static_cache.unpack_tree(packed)
        size = tokens.shape[0]
        past, columns = cache.length, cache.columns
        offset = columns - past  # [S]: the tree slot a column holds, when in [0, size)
        in_tree = (offset >= 0) & (offset < size)
        slot = offset.clamp(0, size - 1)
        visible = (columns < past)[None, :] | (ancestors[:, slot] & in_tree[None, :])  # [B, S]
        positions = past + depths  # [B]
        key_positions = torch.where(in_tree, past + depths[slot], columns)  # [S]
        mask = self._static_mask(visible, positions, key_positions)
        out = self.decoder(input_ids=tokens[None], position_ids=positions[None], attention_mask=mask,
                           **{self.cache_keyword: cache}, use_cache=True)
        hidden = out.last_hidden_state[0]  # [B, H]
        logits = self.lm_head(hidden)  # [B, V]
        selection = greedy_select(tokens, parents, ancestors, valid, logits.argmax(dim=-1))
        return logits, hidden, selection, self.handle.taps.latest()

    def _static_mask(self, visible: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor):
        """Additive Tensor[1, 1, rows, S] from BoolTensor[rows, S] (and the windowed one for sliding layers)."""
        full = self._additive_on_device(visible)
        if self.sliding_window is None:
            return full
        windowed = visible & (query_positions[:, None] - key_positions[None, :] < self.sliding_window)
        return {"full_attention": full, "sliding_attention": self._additive_on_device(windowed)}

    def _additive_on_device(self, visible: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(visible.shape, dtype=self.dtype, device=visible.device)
        return mask.masked_fill(~visible, self._min)[None, None]

    def _additive(self, visible: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(visible.shape, dtype=self.dtype)
        mask.masked_fill_(~visible, self._min)
        return mask[None, None].to(self.device)


def _eos_ids(model, tokenizer) -> set[int]:
    ids: set[int] = set()
    for value in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    return ids


def check_device(device: str) -> None:
    """``cpu``, ``cuda`` or ``cuda:N`` for a device torch can see; anything else is a one-line error."""
    if device == "cpu":
        return
    if device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise SpecbenchError(f"--device must be cpu, cuda or cuda:N, got {device!r}")
    if not torch.cuda.is_available():
        raise SpecbenchError(f"--device {device}: torch sees no CUDA device (torch {torch.__version__})")
    index = int(device[5:]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise SpecbenchError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) visible")


def load_target(spec: str = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32",
                device_map: str | None = None) -> TargetModel:
    """Load ``spec`` (``default``, a model directory, or a .gguf file) on ``device`` in ``dtype``; with
    ``device_map`` (specbench.placement.STRATEGIES) spread over every visible GPU instead (or, with
    ``device="cpu"``, planned by accelerate onto the host: the same code path, for checking it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the converted copy loads in well under a second
    if dtype not in DTYPES:
        raise SpecbenchError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    check_device_map(device_map, device)
    check_device(device)
    source = resolve_model(spec)
    folder = converted_copy(source) if source.path.is_file() else source.path
    tokenizer = AutoTokenizer.from_pretrained(folder)
    placement = {} if device_map is None else {"device_map": placement_plan(folder, device_map, DTYPES[dtype], device=device)}
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype], attn_implementation="sdpa", **placement)
    if not getattr(tokenizer, "chat_template", None) and model.config.model_type in ("gemma3", "gemma3_text"):
        tokenizer.chat_template = GEMMA3_TURNS  # the packaged Gemma-3 GGUF is the base model, without one
        end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")  # a turn ends there, as in Gemma's chat models
        model.generation_config.eos_token_id = sorted({tokenizer.eos_token_id, end_of_turn})
    return TargetModel(model if device_map else model.to(device), tokenizer, source)
