"""eagle: EAGLE's feature-level autoregressive drafter, with EAGLE-2's dynamic tree.

The draft model is one decoder layer. At draft position t it reads ``fc([E(x_{t+1}); f_t])``: the
embedding of the token at t + 1 (first) fused with the target's last hidden state f_t, taken after the
target's final norm. It predicts f_{t+1}. Token scores come from the target's frozen ``lm_head`` applied
to the predicted feature (shared, not copied; cut to the draft vocabulary like the head drafters).

**Cache.** The keys and values of accepted positions are cached across steps. They are computed from the
target's true features (EAGLE's ``stable_kv``), so nothing is ever rolled back. Tree nodes use their
parents' predicted features and are not cached.

**Dynamic tree (EAGLE-2).** Each step:
1. The root's predicted feature scores ``top_k`` depth-1 candidates (log-probabilities).
2. Each of up to ``depth`` expansions runs the ``top_k`` frontier nodes, best by cumulative
   log-probability, through the layer in one batch. Each node attends to the cache and its own ancestors.
3. Each expanded node proposes ``top_k`` children, scored parent + log p. The best ``top_k`` of those
   become the next frontier.
4. The ``budget - 1`` best-scored candidates form the tree (`dynamic_tree.grow`).

The tree therefore adapts to how confident the draft is in this context, within the harness's budget.
Drafts are deterministic (top-k), so greedy and rejection verification both apply.
"""

from __future__ import annotations

import torch
from torch import nn

from specbench.drafter import DraftContext, TargetHandle
from specbench.drafters.checkpointed import CheckpointDrafter
from specbench.drafters.dynamic_tree import DynamicTreeDrafter
from specbench.drafters.layers import compile_draft_layer
from specbench.drafters.prefix_attention import PrefixAttention, PrefixCache
from specbench.errors import DrafterOptionError


class EagleModule(nn.Module):
    """``fc`` (2H -> H) and one decoder layer without an input norm; ``forward_sequence`` for training.

    specbench trains the layer MHA with an MLP 2H wide; ``layer_shape`` (`PrefixAttention`'s num_kv_heads,
    inner, rope_base, eps) gives it the target's shape, as SafeAILab's released weights have it."""

    def __init__(self, hidden: int, num_heads: int, inner: int | None = None, fc_bias: bool = True,
                 layer_shape: dict | None = None) -> None:
        super().__init__()
        self.fc = nn.Linear(2 * hidden, hidden, bias=fc_bias)
        shape = {"inner": inner} | (layer_shape or {})
        self.layer = PrefixAttention(hidden, num_heads, input_norm=False, **shape)

    def fuse(self, next_embeddings: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """[E(x_{t+1}) ; f_t] [..., 2H] -> the layer's input [..., H]."""
        return self.fc(torch.cat([next_embeddings, features], dim=-1))

    def forward_sequence(self, features: torch.Tensor, next_embeddings: torch.Tensor) -> torch.Tensor:
        """Predicted f_{t+1} [P, H] for features f_0..f_{P-1} [P, H] and embeddings of x_1..x_P [P, H] (causal)."""
        return self.layer.forward_sequence(self.fuse(next_embeddings, features))

    def forward_unrolled(self, features: torch.Tensor, next_embeddings: torch.Tensor, levels: int) -> list[torch.Tensor]:
        """The draft chain along the true path, for every anchor at once: ``levels`` tensors [P, H].

        features f_0..f_{P-1} [P, H]; next_embeddings E(x_1)..E(x_{P+levels-1}) [P + levels - 1, H].
        Level 1 at anchor t predicts f_{t+1} from the true f_t (as `forward_sequence`). Level j > 1 reads
        its own level j - 1 prediction with E(x_{t+j}) at position t + j - 1, and attends to the true
        context 0..t and to its own chain at anchor t: what the dynamic tree's node on the true path sees
        at inference (EAGLE-3's training-time test uses the same mask)."""
        anchors = features.shape[0]
        if next_embeddings.shape[0] != anchors + levels - 1:
            raise ValueError(f"{anchors} features and {levels} levels need {anchors + levels - 1} embeddings, "
                             f"got {next_embeddings.shape[0]}")
        positions = torch.arange(anchors, device=features.device)
        x = self.fuse(next_embeddings[:anchors], features)  # [P, H]
        keys, values = self.layer.keys_values(x, positions)
        keys, values = [keys], [values]
        masks = [positions[:, None] >= positions[None, :]]  # level 1: causal over the true context [P, P]
        own = torch.eye(anchors, dtype=torch.bool, device=features.device)  # each anchor sees its own chain
        out = self.layer.attend(x, positions, keys[0], values[0], masks[0])
        outs = [out]
        for level in range(2, levels + 1):
            x = self.fuse(next_embeddings[level - 1 : level - 1 + anchors], out)  # [E(x_{t+level}); f^_{t+level-1}]
            level_positions = positions + level - 1
            level_keys, level_values = self.layer.keys_values(x, level_positions)
            keys.append(level_keys)
            values.append(level_values)
            masks.append(own)
            out = self.layer.attend(x, level_positions, torch.cat(keys), torch.cat(values), torch.cat(masks, dim=1))
            outs.append(out)
        return outs


class EagleDrafter(DynamicTreeDrafter, CheckpointDrafter):
    """EAGLE-style drafter; options: ``checkpoint`` (path stem, SafeAILab's EAGLE-1/2 weights: their
    directory with ``config.json``, or a speculators "eagle" directory: `speculators_eagle.py`),
    ``draft_vocab``, ``context_vocab``, ``top_k`` (children per expanded node and frontier width, default 8)
    and ``depth`` (expansions per step, default 5; the tree is at most depth + 1 deep)."""

    method = "eagle"
    capturable = True

    def compile_parts(self, compile):
        """The fc fusion and the draft layer's two halves (`compile_draft_layer`)."""
        self.module.fuse = compile(self.module.fuse)
        return ["fc", *compile_draft_layer(self.module.layer, compile)]

    def __init__(self, checkpoint: str | None = None, draft_vocab: int | None = None, top_k: int = 8,
                 depth: int = 5, context_vocab: bool | str = True) -> None:
        super().__init__(checkpoint, draft_vocab, context_vocab)
        if top_k < 1 or depth < 0:
            raise DrafterOptionError(f"eagle needs top_k >= 1 and depth >= 0, got top_k={top_k}, depth={depth}")
        self.top_k, self.depth = top_k, depth

    def build_module(self, recipe: dict, target: TargetHandle) -> nn.Module:
        config = recipe["hyperparameters"]
        return EagleModule(target.config.hidden_size, config["num_heads"], config.get("inner"), config.get("fc_bias", True),
                           config.get("layer_shape"))

    def start_sequence(self) -> None:
        self.cache = PrefixCache()

    def log_probs(self, features: torch.Tensor, cut: torch.Tensor | None = None) -> torch.Tensor:
        """features [n, H] -> draft log-probabilities [n, V'] over the draft vocabulary (``cut``: its
        `DraftVocab.cut_logits` of ``features`` when already computed)."""
        return self.vocab.logits(features, cut).float().log_softmax(dim=-1)

    def cut_logits(self, features: torch.Tensor) -> torch.Tensor:
        """features [n, H] -> the draft vocabulary's logits [n, V'] (shared by a batch's rows)."""
        return self.vocab.cut_logits(features)

    def extend_cache(self, ctx: DraftContext) -> torch.Tensor:
        """Append the newly accepted positions to the cache; the predicted feature after the root [H]."""
        start, count = ctx.first_new_position, ctx.hidden.shape[0]
        next_tokens = ctx.tokens[start + 1 : start + 1 + count].to(ctx.target.device)  # x_{t+1}, root last
        x = self.module.fuse(ctx.target.embed_tokens(next_tokens).to(ctx.hidden.dtype), ctx.hidden)  # [m, H]
        return self.cache.extend(self.module.layer, start, x, self.name or self.method)

    # ---- the dynamic tree's layer (`dynamic_tree.TreeLayer`) -----------------------------------------------
    def node_inputs(self, tokens: torch.Tensor, parent_features: torch.Tensor) -> torch.Tensor:
        """fc([E(token); parent's predicted feature]) [F, H]."""
        return self.module.fuse(self._embed(tokens).to(parent_features.dtype), parent_features)

    def node_keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module.layer.keys_values(x, positions)

    def node_attend(self, x: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
        return self.module.layer.attend(x, positions, keys, values, mask)
