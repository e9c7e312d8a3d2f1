"""The CTC transform: slot distributions -> candidate token sequences -> one prefix tree for verification.

Terms: an *alignment* is one class per slot (a token or the blank); its *collapse* removes repeats that
no blank separates, then the blanks; a *candidate* is a collapsed sequence, whose probability is the sum
over every alignment that collapses to it. CTC prefix beam search finds the likeliest candidates slot by
slot, keeping for each prefix the probability of its alignments that end in a blank and of those that end
in a token (so a repeat merges or extends correctly). Candidates are then merged into a trie whose node
mass is the total probability of the candidates passing through it, and the heaviest nodes (a parent is
never lighter than its child) within the budget become the draft tree. Tree positions are depths, not slot
indices, so a collapsed candidate is verified at the positions it would really occupy (exact).

Without a blank (the cross-entropy ablation) the same search is plain beam search over slot products.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from specbench.tree import DraftTree

Candidates = list[tuple[tuple[int, ...], float]]

#: the search's defaults, shared by the drafters and training's offline estimate (docs/ctc.md, "The
#: search's width"): tokens kept per slot, and the fewest prefixes the beam keeps per slot
DEFAULT_TOP_K = 8
MIN_BEAM = 32  # a beam narrower than the budget cannot fill the tree (beam 16 filled 20 of 32 nodes)


def search_beam(beam: int | None, budget: int) -> int:
    """Prefixes the search keeps per slot for a tree of ``budget`` nodes: ``beam`` when given, else the
    budget and at least `MIN_BEAM` (64 added 0.01 tau to ctc at budget 16 over 32)."""
    return beam if beam is not None else max(MIN_BEAM, budget)


def collapse(alignment: Sequence[int], blank: int) -> tuple[int, ...]:
    """Merge repeats not separated by a blank, then drop blanks.

    >>> collapse([5, 5, -1, 5, 7, -1, -1, 7], blank=-1)
    (5, 5, 7, 7)
    >>> collapse([3, 3, 3], blank=-1)
    (3,)
    >>> collapse([-1, -1], blank=-1)
    ()
    """
    out: list[int] = []
    previous = None
    for label in alignment:
        if label != blank and label != previous:
            out.append(label)
        previous = label
    return tuple(out)


def prefix_beam_search(slot_tokens: Sequence[Sequence[int]], slot_probs: Sequence[Sequence[float]],
                       blank_probs: Sequence[float] | None, beam: int) -> Candidates:
    """Likeliest collapsed sequences from per-slot top tokens.

    slot_tokens[t] / slot_probs[t]: the tokens kept at slot t and their probabilities; blank_probs[t]: the
    blank's probability at slot t, or None for no blank (plain beam search, repeats kept). Returns
    (candidate, probability) best first; at most ``beam`` prefixes survive each slot.

    Two slots over tokens {7, 8} and a blank; "7 7" and "7 _" and "_ 7" all collapse to (7,):

    >>> found = prefix_beam_search([[7, 8], [7, 8]], [[0.5, 0.1], [0.3, 0.1]], [0.4, 0.6], beam=8)
    >>> [(c, round(p, 3)) for c, p in found]
    [((7,), 0.57), ((), 0.24), ((8,), 0.11), ((7, 8), 0.05), ((8, 7), 0.03)]
    """
    collapse_repeats = blank_probs is not None
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (1.0, 0.0)}  # prefix -> (p ends in blank, p ends in token)
    for t, (tokens, probs) in enumerate(zip(slot_tokens, slot_probs)):
        grown: dict[tuple[int, ...], list[float]] = defaultdict(lambda: [0.0, 0.0])
        p_blank = blank_probs[t] if collapse_repeats else 0.0
        for prefix, (ends_blank, ends_token) in beams.items():
            total = ends_blank + ends_token
            if p_blank:
                grown[prefix][0] += total * p_blank
            last = prefix[-1] if prefix else None
            for token, p in zip(tokens, probs):
                if collapse_repeats and token == last:
                    grown[prefix][1] += ends_token * p  # "a a" collapses to "a"
                    if ends_blank:
                        grown[prefix + (token,)][1] += ends_blank * p  # "a _ a" is "a a"
                else:
                    grown[prefix + (token,)][1] += total * p
        best = sorted(grown.items(), key=lambda item: -(item[1][0] + item[1][1]))[:beam]
        beams = {prefix: (pb, pt) for prefix, (pb, pt) in best}
    ranked = sorted(((prefix, pb + pt) for prefix, (pb, pt) in beams.items()), key=lambda item: -item[1])
    return [(prefix, p) for prefix, p in ranked if p > 0.0]


def candidate_tree(root: int, candidates: Candidates, budget: int) -> DraftTree:
    """The heaviest prefix tree of ``candidates`` after ``root`` with at most ``budget`` nodes.

    A node's mass is the summed probability of the candidates through it. Nodes are taken heaviest first
    (shallower first on ties, so parents precede children), and their positions are their depths.

    >>> tree = candidate_tree(1, [((5, 6), 0.5), ((5, 7), 0.3), ((8,), 0.1)], budget=4)
    >>> tree.tokens.tolist(), tree.parents.tolist()
    ([1, 5, 6, 7], [-1, 0, 1, 1])
    """
    mass: dict[tuple[int, ...], float] = defaultdict(float)
    for candidate, p in candidates:
        for depth in range(1, len(candidate) + 1):
            mass[candidate[:depth]] += p
    chosen = sorted(mass, key=lambda prefix: (-mass[prefix], len(prefix)))[: max(0, budget - 1)]
    index = {(): 0}
    tokens, parents = [root], [-1]
    for prefix in sorted(chosen, key=len):
        if prefix[:-1] in index:  # always, unless rounding made a child outweigh its parent
            index[prefix] = len(tokens)
            tokens.append(prefix[-1])
            parents.append(index[prefix[:-1]])
    tree = DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long))
    tree._parents_list = parents
    return tree


def slot_candidates(logits: torch.Tensor, has_blank: bool, top_k: int, min_prob: float,
                    vocab_ids: torch.Tensor | None = None) -> tuple[list, list, list | None]:
    """Per-slot top-k tokens and probabilities (and the blank's probability) from logits [T, V (+1)];
    with ``vocab_ids`` [V'] (a draft vocabulary's token ids) the logits' columns are those tokens.

    Tokens below ``min_prob`` are dropped (each slot keeps at least its best token): they cannot reach a
    tree of the sizes used here, and skipping them keeps the search cheap.
    """
    probs = logits.float().softmax(dim=-1)  # [T, C]
    vocab = probs[:, :-1] if has_blank else probs
    top = vocab.topk(min(top_k, vocab.shape[-1]), dim=-1)  # [T, k]: no more tokens than the vocabulary has
    keep = top.values >= min_prob
    keep[:, 0] = True
    indices = top.indices if vocab_ids is None else vocab_ids[top.indices]  # [T, k] token ids
    values, indices = top.values.tolist(), indices.tolist()
    rows = keep.tolist()
    tokens = [[tok for tok, ok in zip(ids, row) if ok] for ids, row in zip(indices, rows)]
    token_probs = [[p for p, ok in zip(ps, row) if ok] for ps, row in zip(values, rows)]
    blanks = probs[:, -1].tolist() if has_blank else None
    return tokens, token_probs, blanks
