"""ctc: the CTC-drafter (Wen, Gui, Feng; NeurIPS 2024), non-autoregressive as the paper describes it.

Each step: the hidden states the verifier just accepted (fused with the tokens that followed them) extend
the Attention Draft Module's context cache; T slots draft in one forward (logits over V + blank); the
top-k tokens per slot feed the CTC transform (prefix beam search with blank/repeat collapse, duplicates
merged, heaviest prefix tree within the budget, positions = depths), timed as the "transform" stage.
``ctc-ce`` is the ablation: the same module trained with per-slot cross-entropy and no blank.
See docs/ctc.md for how this relates to the paper and to the released code.
"""

from __future__ import annotations

import torch

from specbench.drafter import DraftContext, TargetHandle
from specbench.drafters.checkpointed import CheckpointDrafter
from specbench.drafters.ctc_module import AttentionDraftModule, ContextCache, build_module
from specbench.drafters.ctc_transform import (
    DEFAULT_TOP_K,
    MIN_BEAM,
    candidate_tree,
    prefix_beam_search,
    search_beam,
    slot_candidates,
)
from specbench.errors import DrafterOptionError
from specbench.tree import DraftTree


class CTCDrafter(CheckpointDrafter):
    """Options: ``checkpoint`` (path stem), ``top_k`` tokens per slot, ``beam`` prefixes kept per slot
    (default: the tree budget, at least `MIN_BEAM`), ``min_prob`` (slot tokens below it are skipped),
    ``draft_vocab`` and ``context_vocab`` (see `CheckpointDrafter`)."""

    method = "ctc"
    capturable = True

    def compile_parts(self, compile):
        """The context features and their keys/values (the newly accepted rows), and the slots' decoder layer
        over the growing context (dynamo makes its length symbolic). The prefix beam search is host code."""
        for part in ("context_features", "context_keys_values", "slot_features"):
            setattr(self.module, part, compile(getattr(self.module, part)))
        return ["context features", "context keys/values", "slot layer"]

    def __init__(self, checkpoint: str | None = None, top_k: int = DEFAULT_TOP_K, beam: int | None = None,
                 min_prob: float = 1e-3, draft_vocab: int | None = None, context_vocab: bool | str = True) -> None:
        super().__init__(checkpoint, draft_vocab, context_vocab)
        if top_k < 1 or (beam is not None and beam < 1) or not 0.0 <= min_prob < 1.0:
            raise DrafterOptionError(f"needs top_k >= 1, beam >= 1 and 0 <= min_prob < 1, got top_k={top_k}, "
                                     f"beam={beam}, min_prob={min_prob}")
        self.top_k, self.beam, self.min_prob = top_k, beam, min_prob
        self.context = ContextCache()

    def build_module(self, recipe: dict, target: TargetHandle) -> AttentionDraftModule:
        config = recipe["hyperparameters"]
        return build_module(recipe["method"], target.config.hidden_size, config["num_heads"], config["num_slots"],
                            config["slot_blocks"])

    def identity(self) -> str:
        """The checkpoint's identity and the search settings (defaults included: a changed default changes
        the proposals, so cached calibration curves must not be reused)."""
        beam = self.beam if self.beam is not None else f"max({MIN_BEAM},budget)"
        return f"{super().identity()}:search:top_k={self.top_k}:beam={beam}:min_prob={self.min_prob}"

    def start_sequence(self) -> None:
        self.context = ContextCache()

    @torch.inference_mode()
    def propose(self, ctx: DraftContext) -> DraftTree:
        self.extend_context(ctx)
        if ctx.budget == 1:
            return DraftTree.root_only(ctx.root)
        return self.transform(ctx, self.context.draft_logits(self.module, self.vocab.logits))

    def extend_context(self, ctx: DraftContext) -> None:
        """The accepted positions (and the tokens that followed them) into this sequence's context cache."""
        self.follow_context(ctx)
        following = ctx.tokens[-ctx.hidden.shape[0] :].to(ctx.target.device)  # the tokens after the new positions
        self.context.extend(self.module, ctx.first_new_position, ctx.hidden, ctx.target.embed_tokens(following),
                            self.name or self.method)

    def transform(self, ctx: DraftContext, logits: torch.Tensor) -> DraftTree:
        """The CTC transform of the slots' logits [T, V' (+1)] into this step's tree (timed as ``transform``)."""
        tokens, probs, blanks = slot_candidates(logits, self.module.blank is not None, self.top_k, self.min_prob,
                                                self.vocab.columns)
        with ctx.span("transform"):
            candidates = prefix_beam_search(tokens, probs, blanks, search_beam(self.beam, ctx.budget))
            return candidate_tree(ctx.root, candidates, ctx.budget)

    @torch.inference_mode()
    def propose_rows(self, rows):
        """Every row's context extended on its own, then the slots of all rows in one forward of the slot layer:
        row r's slots attend to its own context only (the rows' contexts concatenated [P, heads, d] under a
        block mask [R, P]); each row then scores its slots over its own vocabulary and runs its transform."""
        if len(rows) == 1 or rows[0][1].budget == 1:
            return super().propose_rows(rows)
        for drafter, ctx in rows:
            drafter.extend_context(ctx)
        contexts = [drafter.context for drafter, _ in rows]
        module = self.module
        device = contexts[0].last.device
        mask = torch.block_diag(*[torch.ones(1, c.length, dtype=torch.bool, device=device) for c in contexts])  # [R, P]
        positions = torch.stack([c.length + torch.arange(module.num_slots, device=device) for c in contexts])  # [R, T]
        features = module.slot_features(module.slot_inputs(torch.stack([c.last for c in contexts])), positions,
                                        torch.cat([c.keys for c in contexts]), torch.cat([c.values for c in contexts]),
                                        mask)  # [R, T, H]
        return [drafter.transform(ctx, module.logits(features[r], drafter.vocab.logits))
                for r, (drafter, ctx) in enumerate(rows)]


class CTCCrossEntropyDrafter(CTCDrafter):
    """The ablation: the same module and transform, trained with per-slot cross-entropy (no blank)."""

    method = "ctc-ce"
