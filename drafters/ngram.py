"""ngram: training-free prompt-lookup drafting.

Match the last n tokens (longest n first, ``max_ngram`` down to ``min_ngram``) earlier in the context
and propose what followed. Several matches give several continuations; the most recent ones are merged
into a prefix tree within the node budget (a single match gives a chain). The n-gram index is built
incrementally, so each step costs O(new tokens x n) dictionary operations.

Defaults (a chain of at most 4 tokens after a match of 2 or 3 tokens) come from
a sweep of its options (the retired ``benchmarks/sweep.py``, docs/journal/retired-scripts.md) on MT-bench
with the default model on 2 CPU threads, where a
verified node is not free (1 token ~35 ms, 5 tokens ~46 ms): wider trees (``max_candidates=3``) and
unigram matches raised tau slightly but lost more in verify time (docs/performance.md).
"""

from __future__ import annotations

from specbench.drafter import DraftContext, Drafter, TargetHandle
from specbench.errors import DrafterOptionError
from specbench.tree import DraftTree


class NgramDrafter(Drafter):
    """Prompt-lookup drafter.

    max_ngram / min_ngram: longest and shortest suffix length to match
    max_depth:             longest continuation proposed (tree depth)
    max_candidates:        how many distinct continuations to merge into the tree (1 = a chain)
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 2, max_depth: int = 4, max_candidates: int = 1) -> None:
        super().__init__()
        if not 1 <= min_ngram <= max_ngram:
            raise DrafterOptionError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}")
        if max_depth < 1 or max_candidates < 1:
            raise DrafterOptionError("max_depth and max_candidates must be at least 1")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.max_depth, self.max_candidates = max_depth, max_candidates
        self._tokens: list[int] = []
        self._index: dict[tuple[int, ...], list[int]] = {}  # n-gram -> end positions (exclusive), ascending
        self._indexed_until = 0  # n-grams ending before this position are indexed

    def max_budget(self) -> int:
        return 1 + self.max_depth * self.max_candidates  # disjoint continuations, every one full length

    def reset(self, target: TargetHandle) -> None:
        self._tokens, self._index, self._indexed_until = [], {}, 0

    def _update_index(self) -> None:
        tokens, index = self._tokens, self._index
        # Index n-grams ending at positions < len - 1: the one ending at the last token is the query.
        for end in range(max(self._indexed_until, 1), len(tokens)):
            for n in range(self.min_ngram, min(self.max_ngram, end) + 1):
                index.setdefault(tuple(tokens[end - n : end]), []).append(end)
        self._indexed_until = len(tokens)

    def continuations(self) -> list[list[int]]:
        """Distinct continuations of the current suffix, longest match first, most recent first."""
        tokens = self._tokens
        found: list[list[int]] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_ngram, len(tokens)), self.min_ngram - 1, -1):
            for end in reversed(self._index.get(tuple(tokens[-n:]), ())):
                follow = tuple(tokens[end : end + self.max_depth])
                if follow and follow not in seen:
                    seen.add(follow)
                    found.append(list(follow))
                    if len(found) == self.max_candidates:
                        return found
        return found

    def propose(self, ctx: DraftContext) -> DraftTree:
        self._tokens.extend(ctx.tokens[len(self._tokens) :].tolist())
        self._update_index()
        candidates = self.continuations()
        if not candidates or ctx.budget == 1:
            return DraftTree.root_only(ctx.root)
        return DraftTree.from_sequences(ctx.root, candidates, budget=ctx.budget)
