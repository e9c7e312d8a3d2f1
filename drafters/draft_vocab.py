"""A drafter's output vocabulary cut to the target's most frequent tokens (the idea of FR-Spec).

Scoring a draft position costs one row of the target's ``lm_head``: V x H multiply-adds that, on a CPU,
stream the whole matrix (113 MB for the default model) from memory for every drafted row. Drafting over
the V' most frequent tokens streams V'/V of it. Verification is untouched (the target's full distribution
decides every token), so outputs stay exact: a token outside the cut can only fail to be proposed.

The ranking is measured at training time on the distillation cache (token counts over the train split's
prompts and the target's own responses) and stored in the checkpoint under `RANKING_KEY`.

A global ranking misses the words of the conversation at hand: on MT-bench the 8,192-token cut covers
93.1% of the default model's greedy tokens, and two thirds of the misses ("Mars", "orbital",
"entangled") already occur in the prompt or the answer so far. `DraftVocab.follow_context` adds every
token of the sequence that the cut lacks as an extra column (the target's row), so the cut plus the
context covers 97.7% for ~11 extra rows a turn (docs/performance.md, "The conversation's own words").
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from specbench.linear import kernel_of, weight_left_linear

RANKING_KEY = "vocab_ranking"
#: tokens a head drafter scores by default (when its checkpoint stores a ranking); chosen by measurement,
#: see docs/performance.md ("Draft vocabulary")
DEFAULT_DRAFT_VOCAB = 8192


def token_ranking(cache: Path, vocab_size: int) -> torch.Tensor:
    """IntTensor[V]: every token id, most frequent first in the cache's train split (ties: lower id first)."""
    from specbench.drafters.training.distill import iter_token_ids

    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids in iter_token_ids(cache, "train"):
        counts += torch.bincount(ids.long(), minlength=vocab_size)
    return torch.sort(counts, descending=True, stable=True).indices.to(torch.int32)


class DraftVocab:
    """The drafter's view of the ``lm_head``: all V rows, or the ``size`` most frequent tokens' rows.

    ``logits(features [..., H]) -> [..., V']`` and ``token_ids(indices) -> ids`` translate back; with the
    full vocabulary both are the identity on ids. `of_projection` wraps a head's own output projection.
    """

    def __init__(self, lm_head: nn.Module, ranking: torch.Tensor | None, size: int) -> None:
        vocab = lm_head.weight.shape[0]
        self.lm_head = lm_head
        self.full_size = vocab  # V, the target's vocabulary (token ids run below it)
        self.ids: torch.Tensor | None = None
        self._project = lm_head  # features [..., H] -> logits [..., V']
        self.context_rows: nn.Module | None = lm_head  # where an extra column's row comes from: the target's lm_head
        self.forget_context()
        if 0 < size < vocab:
            if ranking is None:
                raise ValueError("this checkpoint stores no vocabulary ranking (retrain it to use draft_vocab)")
            ids = ranking[:size].long().sort().values.to(lm_head.weight.device)  # [V'], ascending ids
            self.ids = ids
            self.weight = lm_head.weight.detach()[ids].contiguous()  # [V', H], a copy of V' rows
            bias = getattr(lm_head, "bias", None)
            self.bias = bias.detach()[ids] if bias is not None else None
            # the target lm_head's kernel (specbench.linear), decided once rather than on every draft call
            self._linear = weight_left_linear if kernel_of(lm_head) == "weight-left" else nn.functional.linear
            self._project = self._cut_logits

    @classmethod
    def of_projection(cls, projection: nn.Module, ranking: torch.Tensor | None, vocab_size: int,
                      context_rows: nn.Module | None = None) -> "DraftVocab":
        """A head's own output projection [V', H] (Medusa-1's layout) as a vocabulary: its rows are all V
        tokens, or (V' < V) the V' most frequent of ``ranking`` in ascending id order, as a cut copies them.
        By default it takes no context columns: the head has no row of its own for a token outside its V', and
        the target's row, scored against features trained for the head's rows, lost tau (the shipped medusa:
        -0.003 on MT-bench and -0.015 on Spec-Bench at budget 16; docs/performance.md). ``context_rows`` [V, H]
        (the target's lm_head) scores them where a drafter asks for it (eagle3's ``context_vocab``)."""
        vocab = cls(projection, None, 0)
        vocab.full_size = vocab_size
        vocab.context_rows = context_rows
        rows = projection.weight.shape[0]
        if rows < vocab_size:
            if ranking is None:
                raise ValueError(f"an output projection of {rows} rows needs the checkpoint's vocabulary ranking")
            vocab.ids = ranking[:rows].long().sort().values.to(projection.weight.device)  # [V'], ascending ids
        return vocab

    @property
    def size(self) -> int:
        """V': the rows the cut (or the whole vocabulary) scores, extra context columns not counted."""
        return int(self.lm_head.weight.shape[0] if self.ids is None else self.ids.shape[0])

    @property
    def columns(self) -> torch.Tensor | None:
        """The token id of every logit column [V' + E] (the cut, then the context's extras); None for the
        whole vocabulary, whose columns are the ids themselves."""
        if self.ids is None or not self._extra_ids:
            return self.ids
        if self._columns is None:
            extra = torch.tensor(self._extra_ids, dtype=torch.long, device=self.ids.device)
            self._columns = torch.cat([self.ids, extra])
        return self._columns

    def forget_context(self) -> None:
        """Drop the extra columns (a new sequence starts)."""
        self._extra_ids: list[int] = []
        self._extra_weight: torch.Tensor | None = None  # [E, H]
        self._extra_bias: torch.Tensor | None = None  # [E]
        self._columns: torch.Tensor | None = None
        self._member: torch.Tensor | None = None  # BoolTensor[V] (CPU): a column already scores the token

    def follow_context(self, tokens: torch.Tensor) -> None:
        """Add the tokens [n] that no column scores yet as extra columns (each the target's row), so a word
        of this sequence outside the cut can be drafted. No-op for the whole vocabulary."""
        if self.ids is None or self.context_rows is None or tokens.numel() == 0:
            return
        if self._member is None:
            self._member = torch.zeros(self.full_size, dtype=torch.bool)
            self._member[self.ids.cpu()] = True
        tokens = tokens.cpu().long()
        new = tokens[~self._member[tokens]].unique()  # [e], ascending
        if new.numel() == 0:
            return
        self._member[new] = True
        rows = self.context_rows.weight.detach()[new.to(self.context_rows.weight.device)]  # [e, H]
        self._extra_weight = rows if self._extra_weight is None else torch.cat([self._extra_weight, rows])
        bias = getattr(self.context_rows, "bias", None)
        if bias is not None:
            new_bias = bias.detach()[new.to(bias.device)]
            self._extra_bias = new_bias if self._extra_bias is None else torch.cat([self._extra_bias, new_bias])
        self._extra_ids += new.tolist()
        self._columns = None

    def _cut_logits(self, features: torch.Tensor) -> torch.Tensor:
        return self._linear(features, self.weight, self.bias)

    def cut_logits(self, features: torch.Tensor) -> torch.Tensor:
        """features [..., H] -> logits [..., V'] of the cut (or whole vocabulary) alone: the part every row of a
        batch shares (their row copies share the weights), so a batch's rows can be scored in one product."""
        return self._project(features)

    def logits(self, features: torch.Tensor, cut: torch.Tensor | None = None) -> torch.Tensor:
        """features [..., H] -> logits [..., V' + E] over the drafter's vocabulary (the cut's V' columns,
        then E extra columns of the context, `follow_context`); ``cut``: `cut_logits` of these features,
        when already computed."""
        logits = self._project(features) if cut is None else cut  # [..., V']
        if self._extra_weight is None:
            return logits
        extra = nn.functional.linear(features, self._extra_weight.to(features.dtype), self._extra_bias)  # [..., E]
        return torch.cat([logits, extra.to(logits.dtype)], dim=-1)

    def token_ids(self, indices: torch.Tensor) -> torch.Tensor:
        """Indices into the drafter's columns -> the target's token ids (same shape)."""
        columns = self.columns
        return indices if columns is None else columns[indices]

    def label_indices(self, labels: torch.Tensor, ignore: int) -> torch.Tensor:
        """Target token ids -> indices into the drafter's vocabulary (same shape); ids outside the cut
        and ``ignore`` entries become ``ignore`` (training skips what the drafter could never propose)."""
        if self.ids is None:
            return labels
        lookup = torch.full((self.full_size,), ignore, dtype=torch.long, device=labels.device)
        lookup[self.ids.to(labels.device)] = torch.arange(len(self.ids), device=labels.device)
        return torch.where(labels == ignore, labels, lookup[labels.clamp(min=0)])
