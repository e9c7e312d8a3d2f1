"""`DraftTree`: depths, ancestor masks and paths against hand-written answers; the trie built by
`from_sequences` (shared prefixes, budget truncation); `chain` / `root_only`; every rule of `validate`."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specbench import DraftTree, SpecbenchError

#         0 (10)
#        /      \
#     1 (11)    2 (12)
#     /    \        \
#  3 (13)  4 (14)   6 (16)
#    |
#  5 (15)
TOKENS = [10, 11, 12, 13, 14, 15, 16]
PARENTS = [-1, 0, 0, 1, 1, 3, 2]
DEPTHS = [0, 1, 1, 2, 2, 3, 2]
MASK = [
    # 0  1  2  3  4  5  6
    [1, 0, 0, 0, 0, 0, 0],  # 0
    [1, 1, 0, 0, 0, 0, 0],  # 1
    [1, 0, 1, 0, 0, 0, 0],  # 2
    [1, 1, 0, 1, 0, 0, 0],  # 3
    [1, 1, 0, 0, 1, 0, 0],  # 4
    [1, 1, 0, 1, 0, 1, 0],  # 5
    [1, 0, 1, 0, 0, 0, 1],  # 6
]


def literal_tree() -> DraftTree:
    return DraftTree(torch.tensor(TOKENS), torch.tensor(PARENTS))


def test_literal_tree_structure():
    tree = literal_tree()
    assert len(tree) == 7
    assert tree.parents_list == PARENTS
    assert tree.depths() == DEPTHS
    assert tree.max_depth() == 3
    assert not tree.is_chain()
    mask = tree.ancestor_mask()
    assert mask.dtype == torch.bool
    assert torch.equal(mask, torch.tensor(MASK, dtype=torch.bool))
    assert tree.path_to(0) == [0]
    assert tree.path_to(5) == [0, 1, 3, 5]
    assert tree.path_to(4) == [0, 1, 4]
    assert tree.path_to(6) == [0, 2, 6]
    tree.validate(root=10, budget=7)


def test_chain():
    tree = DraftTree.chain(5, [6, 7, 8])
    assert tree.tokens.tolist() == [5, 6, 7, 8]
    assert tree.parents.tolist() == [-1, 0, 1, 2]
    assert tree.tokens.dtype == tree.parents.dtype == torch.long
    assert tree.is_chain()
    assert tree.depths() == [0, 1, 2, 3]
    assert tree.max_depth() == 3
    assert torch.equal(tree.ancestor_mask(), torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    assert tree.path_to(3) == [0, 1, 2, 3]
    tree.validate(root=5, budget=4)


def test_chain_without_drafts_is_root_only():
    assert DraftTree.chain(9, []).parents.tolist() == [-1]
    assert DraftTree.chain(9, []).tokens.tolist() == [9]


def test_root_only():
    tree = DraftTree.root_only(42)
    assert len(tree) == 1
    assert tree.tokens.tolist() == [42]
    assert tree.parents.tolist() == [-1]
    assert tree.is_chain()
    assert tree.depths() == [0]
    assert tree.max_depth() == 0
    assert torch.equal(tree.ancestor_mask(), torch.tensor([[True]]))
    assert tree.path_to(0) == [0]
    tree.validate(root=42, budget=1)


def test_from_sequences_shares_prefixes():
    tree = DraftTree.from_sequences(10, [[1, 2, 3], [1, 2, 4], [1, 5], [6]])
    assert tree.tokens.tolist() == [10, 1, 2, 3, 4, 5, 6]
    assert tree.parents.tolist() == [-1, 0, 1, 2, 2, 1, 0]
    assert tree.parents_list == tree.parents.tolist()
    assert tree.depths() == [0, 1, 2, 3, 3, 2, 1]
    tree.validate(root=10, budget=7)


def test_from_sequences_duplicates_and_empty_sequences_add_nothing():
    tree = DraftTree.from_sequences(10, [[1, 2], [], [1, 2], [1]])
    assert tree.tokens.tolist() == [10, 1, 2]
    assert tree.parents.tolist() == [-1, 0, 1]
    assert tree.is_chain()


def test_from_sequences_single_sequence_is_a_chain():
    tree = DraftTree.from_sequences(3, [[4, 5, 6]])
    assert tree.is_chain()
    assert tree.tokens.tolist() == DraftTree.chain(3, [4, 5, 6]).tokens.tolist()


def test_from_sequences_budget_truncates():
    sequences = [[1, 2, 3], [1, 2, 4], [1, 5], [6]]
    # Budget 5: the first two sequences fit; [1, 5] would need a sixth node, [6] too.
    tree = DraftTree.from_sequences(10, sequences, budget=5)
    assert tree.tokens.tolist() == [10, 1, 2, 3, 4]
    assert tree.parents.tolist() == [-1, 0, 1, 2, 2]
    # Budget 3: the first sequence is cut in the middle; later ones only reuse existing nodes.
    tree = DraftTree.from_sequences(10, sequences, budget=3)
    assert tree.tokens.tolist() == [10, 1, 2]
    assert tree.parents.tolist() == [-1, 0, 1]
    # Budget 1: root only.
    tree = DraftTree.from_sequences(10, sequences, budget=1)
    assert tree.tokens.tolist() == [10]
    assert tree.parents.tolist() == [-1]


def test_from_sequences_budget_keeps_later_sequences_that_fit_in_shared_nodes():
    # After the budget is full, a later sequence sharing a prefix walks the existing nodes and stops at
    # its first new token, so the tree never exceeds the budget.
    tree = DraftTree.from_sequences(0, [[1, 2], [3, 4], [1, 2, 9]], budget=4)
    assert tree.tokens.tolist() == [0, 1, 2, 3]
    assert tree.parents.tolist() == [-1, 0, 1, 0]


# ---- validate: one broken rule at a time --------------------------------------------------------------


def test_validate_accepts_a_full_budget():
    """A valid tree passes at exactly its own size and at any larger budget, sampled-draft fields
    included, and validating leaves it unchanged; one node less of budget is refused (an exact boundary)."""
    tree = literal_tree()
    for budget in (7, 8, 100):
        assert tree.validate(root=10, budget=budget) is None
    assert tree.tokens.tolist() == TOKENS and tree.parents.tolist() == PARENTS and tree.probs is None
    with pytest.raises(SpecbenchError, match="has 7 nodes; it must have between 1 and the budget 6"):
        tree.validate(root=10, budget=6)
    for draws in ("independent", "without_replacement"):
        sampled = DraftTree(torch.tensor(TOKENS), torch.tensor(PARENTS), probs=torch.full((7, 20), 0.05), draws=draws)
        assert sampled.validate(root=10, budget=7) is None
        assert sampled.draws == draws and sampled.probs.shape == (7, 20)
    for small in (DraftTree.root_only(3), DraftTree.chain(3, [4, 5]), DraftTree.from_sequences(3, [[4, 5], [6]])):
        assert small.validate(root=3, budget=len(small)) is None
        with pytest.raises(SpecbenchError, match="budget"):
            small.validate(root=3, budget=len(small) - 1)


def test_validate_wrong_root():
    with pytest.raises(SpecbenchError, match="root is token 10, expected the target's 11"):
        literal_tree().validate(root=11, budget=7)


def test_validate_over_budget():
    with pytest.raises(SpecbenchError, match="has 7 nodes.*budget 6"):
        literal_tree().validate(root=10, budget=6)


def test_validate_empty_tree():
    tree = DraftTree(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    with pytest.raises(SpecbenchError, match="has 0 nodes"):
        tree.validate(root=10, budget=4)


@pytest.mark.parametrize(
    "parents, bad_node",
    [
        ([-1, 0, 3, 1], 2),  # parent after the child
        ([-1, 1, 0, 1], 1),  # own parent
        ([0, 0, 1, 2], 0),  # root with a parent
        ([-1, 0, -1, 2], 2),  # a second root
        ([-1, 0, 1, 7], 3),  # parent out of range
    ],
)
def test_validate_parent_not_preceding(parents, bad_node):
    tree = DraftTree(torch.tensor([10, 11, 12, 13]), torch.tensor(parents))
    with pytest.raises(SpecbenchError, match=f"node {bad_node} has parent {parents[bad_node]}"):
        tree.validate(root=10, budget=4)


@pytest.mark.parametrize(
    "tokens, parents",
    [
        (torch.tensor([10, 11, 12]), torch.tensor([-1, 0])),
        (torch.tensor([[10, 11]]), torch.tensor([-1, 0])),
        (torch.tensor([10, 11]), torch.tensor([[-1, 0]])),
    ],
)
def test_validate_shape_mismatch(tokens, parents):
    with pytest.raises(SpecbenchError, match="1-D of equal length"):
        DraftTree(tokens, parents).validate(root=10, budget=8)


# ---- properties over random trees ---------------------------------------------------------------------


@st.composite
def parent_lists(draw, max_nodes: int = 24) -> list[int]:
    n = draw(st.integers(1, max_nodes))
    return [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]


@settings(max_examples=60, deadline=None)
@given(parents=parent_lists())
def test_mask_depths_and_paths_agree(parents):
    n = len(parents)
    tree = DraftTree(torch.arange(n), torch.tensor(parents))
    tree.validate(root=0, budget=n)
    mask, depths = tree.ancestor_mask(), tree.depths()
    for i in range(n):
        path = tree.path_to(i)
        assert path[0] == 0 and path[-1] == i
        assert all(parents[b] == a for a, b in zip(path, path[1:]))
        assert depths[i] == len(path) - 1
        assert mask[i].nonzero().flatten().tolist() == path  # ancestors in index order = root-first path
    assert tree.max_depth() == max(depths)
    assert tree.is_chain() == (parents == list(range(-1, n - 1)))


@settings(max_examples=60, deadline=None)
@given(
    sequences=st.lists(st.lists(st.integers(0, 4), max_size=6), max_size=6),
    budget=st.none() | st.integers(1, 20),
)
def test_from_sequences_is_a_trie_within_budget(sequences, budget):
    tree = DraftTree.from_sequences(99, sequences, budget=budget)
    n = len(tree)
    tree.validate(root=99, budget=budget or n)
    assert tree.parents_list == tree.parents.tolist()
    tokens = tree.tokens.tolist()
    # no two siblings carry the same token
    pairs = [(p, t) for p, t in zip(tree.parents_list[1:], tokens[1:])]
    assert len(pairs) == len(set(pairs))
    # every node spells a prefix of some input sequence
    spelled = {tuple(tokens[j] for j in tree.path_to(i)[1:]) for i in range(n)}
    prefixes = {()} | {tuple(s[:k]) for s in sequences for k in range(len(s) + 1)}
    assert spelled <= prefixes
    if budget is None:
        assert spelled == prefixes  # all of them, each once
        assert n == len(prefixes)
    else:
        assert n <= budget
        # nodes are added in insertion order, so the tree is the unbudgeted one cut to its first nodes
        full = DraftTree.from_sequences(99, sequences)
        assert tokens == full.tokens.tolist()[:n]
        assert tree.parents_list == full.parents_list[:n]
        assert n == min(budget, len(full))
