"""eagle3: EAGLE-3's draft layer over features from three target layers, with EAGLE-2's dynamic tree.

Read from the released code, not copied: SafeAILab/EAGLE at cb7e0841 (``eagle/model/cnets.py``: ``Model``,
``LlamaDecoderLayeremb``; ``eagle/model/modeling_llama_kv.py``: which layers feed the features;
``eagle/traineagle3/config.json``) and vllm-project/speculators at c05b95b3 (``src/speculators/models/eagle3/``,
``src/speculators/convert/eagle/eagle3_legacy_model.py``).

**Features.** The target's hidden states *entering* decoder layers ``layer_ids`` (EAGLE-3's choice: 2,
N // 2 and N - 3 of N layers, low, middle, high; speculators' ``eagle_aux_hidden_state_layer_ids``) are
concatenated, [g_lo; g_mid; g_hi] (3H), and fused by ``fc`` (3H -> H, no bias) into g_t. specbench reads them
through the target's `specbench.layer_tap.LayerTap` (forward hooks that keep what the harness's own forwards
compute: no extra target work; replay's stand-in target records them too). Where no forward was recorded, the
drafter runs the target's decoder on a cache of its own over the accepted tokens to get them.

**Layer.** One decoder layer whose attention reads 2H: ``[input_layernorm(E(x_{t+1})); hidden_norm(g_t)]``
(embedding first); the residual is g_t itself (``norm_before_residual``: the normed g_t), then a pre-norm
SwiGLU MLP. Its output h_t is the next level's input feature (EAGLE-3 feeds its own h back, not the target's
last hidden state) and scores tokens through ``lm_head(norm(h_t))``: its own head over a draft vocabulary of
V' tokens. ``d2t`` [V'] holds offsets (target id = draft index + d2t[index]), ``t2d`` [V] marks the target
tokens the draft vocabulary holds.

**Tree and cache** as `eagle`: accepted positions' keys and values are cached from the true features and
never rolled back; each step grows EAGLE-2's dynamic tree (`dynamic_tree.grow`): ``top_k`` children
per expanded node, a ``top_k`` frontier by cumulative log-probability, ``depth`` expansions, the best
budget - 1 candidates. Drafts are deterministic, so greedy and rejection verification both apply.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from specbench import kv
from specbench.drafter import DraftContext, TargetHandle
from specbench.drafters.checkpointed import CheckpointDrafter
from specbench.drafters.draft_vocab import DraftVocab
from specbench.drafters.dynamic_tree import DynamicTreeDrafter
from specbench.drafters.layers import ROPE_BASE, KVCache, RMSNorm, compile_draft_layer, rope
from specbench.drafters.speculators import default_layer_ids, read_eagle3_directory
from specbench.errors import DrafterOptionError, SpecbenchError
from specbench.verify import VerifyOutcome


class Eagle3Layer(nn.Module):
    """EAGLE-3's decoder layer: attention over ``[input_norm(E); hidden_norm(g)]`` (2H wide inputs to q/k/v),
    residual g (or hidden_norm(g) with ``norm_before_residual``), then ``mlp_norm`` and a SwiGLU MLP."""

    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int | None = None, inner: int | None = None,
                 head_dim: int | None = None, rope_base: float | dict = ROPE_BASE, eps: float = 1e-6,
                 norm_before_residual: bool = False) -> None:
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        self.head_dim = head_dim or hidden // num_heads
        if num_heads % num_kv_heads:
            raise ValueError(f"{num_heads} heads and {num_kv_heads} key/value heads do not divide")
        self.num_heads, self.num_kv_heads, self.rope_base = num_heads, num_kv_heads, rope_base
        self.norm_before_residual = norm_before_residual
        self.input_norm = RMSNorm(hidden, eps=eps)
        self.hidden_norm = RMSNorm(hidden, eps=eps)
        self.q_proj = nn.Linear(2 * hidden, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * hidden, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * hidden, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden, bias=False)
        self.mlp_norm = RMSNorm(hidden, eps=eps)
        inner = inner or 2 * hidden
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def inputs(self, embeddings: torch.Tensor, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(attention input [n, 2H], residual [n, H]) for token embeddings [n, H] and fused features [n, H]."""
        normed = self.hidden_norm(features)
        return torch.cat([self.input_norm(embeddings), normed], dim=-1), normed if self.norm_before_residual else features

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [n, kv_heads, d] of attention inputs x [n, 2H] at positions [n]."""
        shape = (x.shape[0], self.num_kv_heads, self.head_dim)
        return rope(self.k_proj(x).view(shape), positions, self.rope_base), self.v_proj(x).view(shape)

    def attend(self, x: torch.Tensor, residual: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor,
               values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """h [Q, H] for query rows x [Q, 2H] (residual [Q, H]) at positions [Q] over keys/values [P, kv_heads, d];
        mask: bool [Q, P] (True = visible) or None."""
        q = rope(self.q_proj(x).view(x.shape[0], self.num_heads, self.head_dim), positions, self.rope_base)
        group = self.num_heads // self.num_kv_heads
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
        attended = nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1), attn_mask=mask)  # [heads, Q, d]
        return self.finish(attended.transpose(0, 1), residual)

    def attend_chains(self, x: torch.Tensor, residual: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor,
                      values: torch.Tensor, chain_keys: torch.Tensor, chain_values: torch.Tensor,
                      first: int = 0) -> torch.Tensor:
        """`attend` for the training-time test's rows: h [Q, H] for query rows x [Q, 2H] (residual [Q, H]) at
        positions [Q], the rows of anchors first..first+Q-1, row i (anchor t = first + i) seeing the context
        keys/values [P, kv_heads, d] 0..t (causal) and its own chain's chain_keys/values [C, Q, kv_heads, d] at i.
        The same numbers as `attend` over the concatenated keys with a causal-then-diagonal mask, in
        O(Q P + C Q) instead of O((C + 1) P^2): the chain entries are dot products."""
        q = rope(self.q_proj(x).view(x.shape[0], self.num_heads, self.head_dim), positions, self.rope_base)
        group = self.num_heads // self.num_kv_heads
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)  # [P, heads, d]
        chain_keys = chain_keys.repeat_interleave(group, dim=2)  # [C, Q, heads, d]
        chain_values = chain_values.repeat_interleave(group, dim=2)
        scale = self.head_dim ** -0.5
        q = q.transpose(0, 1)  # [heads, Q, d]
        context = (q @ keys.permute(1, 2, 0)) * scale  # [heads, Q, P]
        anchors = torch.arange(first, first + x.shape[0], device=x.device)  # [Q]
        later = anchors[:, None] < torch.arange(keys.shape[0], device=x.device)[None, :]  # [Q, P]
        context = context.masked_fill(later[None], float("-inf"))
        own = torch.einsum("hpd,cphd->hpc", q, chain_keys) * scale  # [heads, Q, C]
        weights = torch.cat([context, own], dim=-1).softmax(dim=-1)  # [heads, Q, P + C]
        attended = weights[..., : keys.shape[0]] @ values.transpose(0, 1)  # [heads, Q, d]
        attended = attended + torch.einsum("hpc,cphd->hpd", weights[..., keys.shape[0] :], chain_values)
        return self.finish(attended.transpose(0, 1), residual)

    def finish(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """h [Q, H] from the attention's output [Q, heads, d]: the output projection, the residual and the MLP."""
        h = residual + self.o_proj(attended.reshape(attended.shape[0], -1))
        normed = self.mlp_norm(h)
        return h + self.down_proj(nn.functional.silu(self.gate_proj(normed)) * self.up_proj(normed))


class Eagle3Module(nn.Module):
    """``fc`` (k * H -> H), the `Eagle3Layer`, the final ``norm`` and the draft ``lm_head`` [V', H], with the
    ``d2t`` [V'] (offsets) and ``t2d`` [V] (membership) buffers. ``layer_ids`` are not weights: the recipe keeps
    them."""

    def __init__(self, hidden: int, num_heads: int, vocab_size: int, draft_vocab: int | None = None,
                 layer_ids: list[int] | None = None, num_kv_heads: int | None = None, inner: int | None = None,
                 head_dim: int | None = None, rope_base: float | dict = ROPE_BASE, eps: float = 1e-6,
                 norm_before_residual: bool = False, num_layers: int | None = None) -> None:
        super().__init__()
        self.layer_ids = list(layer_ids) if layer_ids is not None else default_layer_ids(num_layers or 0)
        draft_vocab = draft_vocab or vocab_size
        self.fc = nn.Linear(len(self.layer_ids) * hidden, hidden, bias=False)
        self.layer = Eagle3Layer(hidden, num_heads, num_kv_heads, inner, head_dim, rope_base, eps, norm_before_residual)
        self.norm = RMSNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, draft_vocab, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(vocab_size, dtype=torch.bool))
        if draft_vocab == vocab_size:
            self.t2d.fill_(True)

    def set_vocabulary(self, token_ids: torch.Tensor) -> None:
        """Make the draft vocabulary the target tokens ``token_ids`` [V'] (row i of lm_head scores token_ids[i])."""
        token_ids = token_ids.long().to(self.d2t.device)
        if token_ids.shape != self.d2t.shape:
            raise ValueError(f"{self.d2t.shape[0]} draft rows, {token_ids.shape[0]} token ids")
        self.d2t.copy_(token_ids - torch.arange(len(token_ids), device=token_ids.device))
        self.t2d.zero_()
        self.t2d[token_ids] = True

    def token_ids(self) -> torch.Tensor:
        """LongTensor[V']: the target id of each draft row."""
        return token_ids_of_rows(self.d2t)

    def forward_unrolled(self, aux: torch.Tensor, next_embeddings: torch.Tensor, levels: int,
                         first: int = 0) -> list[torch.Tensor]:
        """EAGLE-3's training-time test: the layer unrolled ``levels`` times on its own outputs, for anchors
        first..P-1 at once; returns h per level, each [P - first, H] (score with ``lm_head(norm(h))``).

        aux [P, k H]: the target's states entering ``layer_ids`` at positions 0..P-1; next_embeddings
        E(x_1)..E(x_{P+levels-1}) [P + levels - 1, H]. Level 1 at anchor t reads [E(x_{t+1}); fc(aux_t)] causally
        over the true context (as the drafter's cache). Level j > 1 reads E(x_{t+j}) with its own level j - 1 output
        at anchor t (no fc), at position t + j - 1, and attends to the true context 0..t and to its own chain at
        anchor t: the mask the dynamic tree's node on the true path meets at inference. ``first``: anchors before
        it (a prompt the loss does not score) give only the true context's keys and values, no outputs."""
        anchors = aux.shape[0]
        if next_embeddings.shape[0] != anchors + levels - 1:
            raise ValueError(f"{anchors} anchors and {levels} levels need {anchors + levels - 1} embeddings, "
                             f"got {next_embeddings.shape[0]}")
        if not 0 <= first < anchors:
            raise ValueError(f"first anchor {first} outside 0..{anchors - 1}")
        positions = torch.arange(anchors, device=aux.device)
        x, residual = self.layer.inputs(next_embeddings[:anchors], self.fc(aux))  # [P, 2H], [P, H]
        keys, values = self.layer.keys_values(x, positions)  # the true context [P, kv_heads, d]
        wanted = positions[first:]  # [Q] the anchors with outputs
        causal = wanted[:, None] >= positions[None, :]  # [Q, P]
        out = self.layer.attend(x[first:], residual[first:], wanted, keys, values, causal)  # level 1 [Q, H]
        outs, chain_keys, chain_values = [out], [], []
        for level in range(2, levels + 1):
            x, residual = self.layer.inputs(next_embeddings[level - 1 + first : level - 1 + anchors], out)  # [Q, 2H]
            level_positions = wanted + level - 1
            level_keys, level_values = self.layer.keys_values(x, level_positions)
            chain_keys.append(level_keys)
            chain_values.append(level_values)
            out = self.layer.attend_chains(x, residual, level_positions, keys, values, torch.stack(chain_keys),
                                           torch.stack(chain_values), first)  # [Q, H]
            outs.append(out)
        return outs


def token_ids_of_rows(d2t: torch.Tensor) -> torch.Tensor:
    """LongTensor[V']: the target id of each draft row, ``index + d2t[index]`` (d2t [V'] holds offsets)."""
    return torch.arange(d2t.shape[0], device=d2t.device) + d2t


def check_vocabulary(module: Eagle3Module, where: str) -> None:
    """Refuse d2t/t2d that do not describe the same V' distinct target tokens."""
    ids, vocab = module.token_ids(), module.t2d.shape[0]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise SpecbenchError(f"{where}: d2t maps draft rows to ids outside the target's 0..{vocab - 1}")
    if ids.unique().numel() != ids.numel() or int(module.t2d.sum()) != ids.numel() or not bool(module.t2d[ids].all()):
        raise SpecbenchError(f"{where}: d2t and t2d disagree (t2d marks {int(module.t2d.sum())} tokens, d2t maps "
                             f"{ids.unique().numel()} distinct ones of {ids.numel()} rows)")


def eagle3_vocabulary(module: Eagle3Module, target_lm_head: nn.Module, context: bool) -> DraftVocab:
    """eagle3's draft vocabulary: its own head over its V' tokens (d2t, in the checkpoint's row order) and, with
    ``context``, the target's ``lm_head`` rows for the sequence's own tokens outside V' (`DraftVocab.follow_context`).
    The drafter and its training (`specbench.drafters.training.eagle3`) score the same columns through it."""
    ids = module.token_ids()
    vocab = DraftVocab.of_projection(module.lm_head, ids, module.t2d.shape[0], target_lm_head if context else None)
    if vocab.ids is not None or not torch.equal(ids, torch.arange(module.t2d.shape[0], device=ids.device)):
        vocab.ids = ids  # row i scores token ids[i] (a full vocabulary may come in another order too)
    return vocab


class Eagle3Drafter(DynamicTreeDrafter, CheckpointDrafter):
    """EAGLE-3 drafter; options: ``checkpoint`` (a specbench checkpoint stem, a speculators-format directory,
    or the authors' EAGLE-3 directory: config.json + pytorch_model.bin / model.safetensors), ``top_k`` (children
    per expanded node and frontier width, default 8), ``depth`` (expansions per step, default 5) and
    ``context_vocab``: score the sequence's own tokens that the draft vocabulary lacks with the target's
    ``lm_head`` rows, as eagle's cut does (`DraftVocab.follow_context`). Default: as the checkpoint was trained
    (``specbench train eagle3 --context-vocab`` trains those columns; the recipe says so), else off: on a
    checkpoint trained over its own rows only it adds at most 0.008 tau on MT-bench (docs/decisions.md)."""

    method = "eagle3"
    capturable = True

    def compile_parts(self, compile):
        """The fc fusion of the target's layer features and the draft layer's two halves (`compile_draft_layer`), as
        eagle's. The layer taps it reads are host bookkeeping around them and stay eager."""
        self.module.fc.forward = compile(self.module.fc.forward)
        return ["fc", *compile_draft_layer(self.module.layer, compile)]

    def __init__(self, checkpoint: str | None = None, top_k: int = 8, depth: int = 5,
                 context_vocab: bool | str | None = None) -> None:
        super().__init__(checkpoint, None, False if context_vocab is None else context_vocab)
        self.context_vocab_given = context_vocab is not None  # else the recipe's training decides
        if top_k < 1 or depth < 0:
            raise DrafterOptionError(f"eagle3 needs top_k >= 1 and depth >= 0, got top_k={top_k}, depth={depth}")
        self.top_k, self.depth = top_k, depth

    # ---- loading -------------------------------------------------------------------------------------------
    def build_module(self, recipe: dict, target: TargetHandle) -> nn.Module:
        return build_module(recipe["hyperparameters"], target)

    def read_checkpoint(self, target: TargetHandle) -> tuple[dict, dict, Path]:
        from specbench.hub import local_or_hub

        given = local_or_hub(self.checkpoint, "eagle3.checkpoint") if self.checkpoint else None
        if given is not None and Path(given).is_dir():
            found = read_eagle3_directory(Path(given), target)
            if found is not None:
                return found
        return super().read_checkpoint(target)

    def draft_vocabulary(self, target: TargetHandle, ranking: torch.Tensor | None) -> DraftVocab:
        """The module's own head over its V' tokens (d2t), not a cut of the target's lm_head."""
        check_vocabulary(self.module, f"eagle3 checkpoint {self.checkpoint or '(shipped)'}")
        vocab_size = target.lm_head.weight.shape[0]
        if self.module.t2d.shape[0] != vocab_size:
            raise SpecbenchError(f"eagle3 checkpoint {self.checkpoint}: t2d covers {self.module.t2d.shape[0]} tokens, "
                                 f"the target has {vocab_size}")
        if not self.context_vocab_given:  # trained with context columns (`train_eagle3`'s context_vocab): use them
            self.context_vocab = bool(self.recipe.get("hyperparameters", {}).get("context_vocab", False))
        return eagle3_vocabulary(self.module, target.lm_head, self.context_vocab)

    # ---- one sequence ----------------------------------------------------------------------------------------
    def start_sequence(self) -> None:
        self.cache = KVCache()
        self._own_cache = None  # the target's decoder on accepted tokens, when no harness forward was recorded
        self._own_length = 0
        self._pending: torch.Tensor | None = None  # features of the positions the last verify accepted
        self._first = True
        self._row = 0  # the sequence's batch row (`DraftContext.row`): its part of a batched step's taps
        self._proposed_at = 0  # the tap's forward count when this sequence last proposed

    def reset(self, target: TargetHandle) -> None:
        super().reset(target)
        if target.taps is None:
            raise SpecbenchError("eagle3 reads the target's intermediate hidden states: it needs a target with layer "
                                 "taps (specbench.model.TargetModel)")
        target.taps.request(self.module.layer_ids)
        self._taps = target.taps
        self._prefill_forward = target.taps.forwards + 1  # the loop prefills right after reset (`_open_row`)

    def accept(self, outcome: VerifyOutcome) -> None:
        """Keep the accepted positions' features from the verification forward that scored them: the latest
        forward marked ``step`` if it ran after this sequence proposed, at this sequence's batch row."""
        taps = self._taps
        states = None
        if taps is not None and taps.last_step > self._proposed_at:
            states = taps.states(self.module.layer_ids, self._row, taps.last_step, "step")
        if states is not None and max(outcome.path) < states.shape[0]:
            index = torch.tensor(outcome.path, dtype=torch.long, device=states.device)
            self._pending = states.index_select(0, index)
        else:
            self._pending = None

    def target_features(self, ctx: DraftContext) -> torch.Tensor:
        """[m, k H]: the target's hidden states entering the ``layer_ids`` layers at the m positions of ``ctx.hidden``:
        from its prefill's forward at the first call, from the step the last `accept` kept after; from the
        drafter's own target forward where neither was recorded."""
        taps, m = ctx.target.taps, ctx.hidden.shape[0]
        self._taps, self._row = taps, ctx.row
        if self._first:
            states = taps.states(self.module.layer_ids, forward=self._prefill_forward, kind="prefill")
        else:
            states = self._pending
        self._first, self._pending = False, None
        if states is None or states.shape[0] != m:
            with ctx.span("replayed_target"):  # the target's work, redone: not the drafter's own cost
                states = self.own_forward(ctx)
        self._proposed_at = taps.forwards
        return states.to(ctx.hidden.device, ctx.hidden.dtype)

    def own_forward(self, ctx: DraftContext) -> torch.Tensor:
        """The features of the m newest positions from the target's decoder run on the drafter's own cache (where
        no forward recorded them): the same numbers up to fp rounding, at a target forward's cost. The
        cache catches up from wherever it stopped (positions whose features came from the taps)."""
        start, m = ctx.first_new_position, ctx.hidden.shape[0]
        body = ctx.target.model.base_model
        if self._own_cache is None:
            self._own_cache, self._own_length = kv.new_cache(), 0
            self._own_keyword = kv.cache_keyword(body)  # "cache" or "past_key_values", looked up once per sequence
        if start < self._own_length:
            raise RuntimeError("eagle3: own target cache out of step (call reset before each sequence)")
        tokens = ctx.tokens[self._own_length : start + m].to(ctx.target.device)[None]
        body(input_ids=tokens, **{self._own_keyword: self._own_cache}, use_cache=True)
        self._own_length = start + m
        states = ctx.target.taps.states(self.module.layer_ids)
        if states is None:
            raise SpecbenchError("eagle3: the target's decoder ran but its layer taps recorded nothing")
        return states[-m:]

    def log_probs(self, h: torch.Tensor, cut: torch.Tensor | None = None) -> torch.Tensor:
        """h [n, H] -> log-probabilities [n, V'] over the draft vocabulary (``cut``: `cut_logits` of h when
        already computed)."""
        return self.vocab.logits(self.module.norm(h), cut).float().log_softmax(dim=-1)

    def cut_logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [n, H] -> the draft vocabulary's logits [n, V'] (no context columns: its own head has none)."""
        return self.vocab.cut_logits(self.module.norm(h))

    def extend_cache(self, ctx: DraftContext) -> torch.Tensor:
        """Append the newly accepted positions to the cache; h [H] of the newest (the root's predecessor)."""
        start, m = ctx.first_new_position, ctx.hidden.shape[0]
        features = self.module.fc(self.target_features(ctx))  # [m, H]
        next_tokens = ctx.tokens[start + 1 : start + 1 + m].to(ctx.target.device)  # x_{t+1}, the root last
        x, residual = self.module.layer.inputs(ctx.target.embed_tokens(next_tokens).to(features.dtype), features)
        positions = self.cache.next_positions(start, m, features.device, self.name or self.method)
        self.cache.append(*self.module.layer.keys_values(x, positions))
        return self.module.layer.attend(x[-1:], residual[-1:], positions[-1:], self.cache.keys, self.cache.values, None)[0]

    # ---- the dynamic tree's layer (`dynamic_tree.TreeLayer`) -----------------------------------------------
    def node_inputs(self, tokens: torch.Tensor, parent_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x [F, 2H], residual [F, H]) from E(token) and the h its parent predicted (EAGLE-3: its own h, no fc)."""
        return self.module.layer.inputs(self._embed(tokens).to(parent_h.dtype), parent_h)

    def node_keys_values(self, inputs: tuple[torch.Tensor, torch.Tensor], positions: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module.layer.keys_values(inputs[0], positions)

    def node_attend(self, inputs: tuple[torch.Tensor, torch.Tensor], positions: torch.Tensor, keys: torch.Tensor,
                    values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.module.layer.attend(inputs[0], inputs[1], positions, keys, values, mask)


def build_module(config: dict, target: TargetHandle) -> Eagle3Module:
    """An `Eagle3Module` for ``target`` from recipe hyper-parameters (``num_heads``, ``num_kv_heads``, ``inner``,
    ``head_dim``, ``rope_base``, ``eps``, ``draft_vocab``, ``layer_ids``, ``norm_before_residual``)."""
    hidden, vocab = target.config.hidden_size, target.lm_head.weight.shape[0]
    return Eagle3Module(hidden, config.get("num_heads") or target.config.num_attention_heads, vocab,
                        config.get("draft_vocab") or vocab, config.get("layer_ids"), config.get("num_kv_heads"),
                        config.get("inner"), config.get("head_dim"), config.get("rope_base", ROPE_BASE),
                        config.get("eps", 1e-6), bool(config.get("norm_before_residual", False)),
                        num_layers=target.config.num_hidden_layers)


def target_shape(target: TargetHandle, where: Path) -> dict:
    """The draft layer's hyper-parameters shaped like one of ``target``'s layers (heads, key/value heads, MLP
    width, head size, RoPE, norm eps) and EAGLE-3's default ``layer_ids``; ``where`` names it in RoPE errors."""
    from specbench.drafters.published import rope_base

    config = target.config
    return {"num_heads": config.num_attention_heads, "num_kv_heads": getattr(config, "num_key_value_heads", None),
            "inner": getattr(config, "intermediate_size", None), "head_dim": getattr(config, "head_dim", None),
            "rope_base": rope_base(config, where), "eps": getattr(config, "rms_norm_eps", 1e-6),
            "layer_ids": default_layer_ids(config.num_hidden_layers), "norm_before_residual": False}


def untrained_checkpoint(stem: Path, target: TargetHandle, draft_vocab: int | None = None, seed: int = 0,
                         **hyperparameters) -> Path:
    """Write an eagle3 checkpoint of randomly initialised weights for ``target`` (its layer shape: heads, key/value
    heads, MLP width, RoPE) and return its stem; ``draft_vocab`` V' < V keeps V' random target tokens. Proposals
    are poor, exactness is not affected: for tests, and a starting point for training."""
    from specbench.checkpoint import save_checkpoint, target_identity

    vocab = target.lm_head.weight.shape[0]
    shape = target_shape(target, Path(str(stem))) | {"draft_vocab": draft_vocab or vocab} | hyperparameters
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_module(shape, target)
    if shape["draft_vocab"] < vocab:
        module.set_vocabulary(torch.randperm(vocab, generator=generator)[: shape["draft_vocab"]].sort().values)
    recipe = {"method": "eagle3", "target": target_identity(target), "hyperparameters": shape,
              "parameters": sum(p.numel() for p in module.parameters()), "metrics": {},
              "note": "untrained: randomly initialised weights"}
    save_checkpoint(Path(stem), module.state_dict(), recipe, dtype=torch.float32)
    return Path(stem)
