"""Greedy verification on synthetic logits: the argmax at every node is chosen by hand, so the accepted
path, the bonus token and the hidden rows handed back are known exactly."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specbench import DraftTree, VerifyOutcome, verify_greedy
from specbench.verify import greedy_path

V, H = 20, 3


def logits_with_argmax(argmax: list[int], seed: int = 0) -> torch.Tensor:
    """Logits Tensor[n, V]: small noise, plus a clear maximum at ``argmax[i]`` on row i."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(argmax), V, generator=g) * 0.1
    logits[torch.arange(len(argmax)), torch.tensor(argmax)] = 5.0
    return logits


def node_hidden(n: int) -> torch.Tensor:
    """Hidden Tensor[n, H] whose row i is filled with i, so rows identify their node."""
    return torch.arange(n, dtype=torch.float32)[:, None].expand(n, H).clone()


def check(tree: DraftTree, argmax: list[int], path: list[int], bonus: int) -> VerifyOutcome:
    assert greedy_path(tree, argmax) == path
    outcome = verify_greedy(tree, logits_with_argmax(argmax), node_hidden(len(tree)))
    assert outcome.path == path
    assert outcome.bonus == bonus == argmax[path[-1]]
    assert outcome.accepted == len(path) - 1
    assert outcome.tokens == [int(tree.tokens[i]) for i in path]
    assert torch.equal(outcome.hidden, node_hidden(len(tree))[path])  # hidden rows = path rows, in order
    return outcome


def test_root_only_gives_the_bonus():
    outcome = check(DraftTree.root_only(7), [3], path=[0], bonus=3)
    assert outcome.accepted == 0
    assert outcome.tokens == [7]
    assert outcome.hidden.shape == (1, H)


def test_chain_all_accepted():
    tree = DraftTree.chain(10, [1, 2, 3])
    outcome = check(tree, [1, 2, 3, 7], path=[0, 1, 2, 3], bonus=7)
    assert outcome.tokens == [10, 1, 2, 3]
    assert outcome.accepted == 3


@pytest.mark.parametrize("j", [1, 2, 3])
def test_chain_rejected_at_depth_j(j):
    drafts = [1, 2, 3]
    tree = DraftTree.chain(10, drafts)
    argmax = [1, 2, 3, 7]
    argmax[j - 1] = 15  # the target disagrees with the draft at depth j
    check(tree, argmax, path=list(range(j)), bonus=15)


def test_child_of_rejected_node_is_not_accepted():
    # Node 2's token equals the argmax at node 1, but node 1 itself is rejected.
    tree = DraftTree.chain(10, [1, 2])
    check(tree, [5, 2, 9], path=[0], bonus=5)


#         0 (10)
#        /      \
#     1 (11)    2 (12)
#     /    \        \
#  3 (13)  4 (14)   6 (16)
#    |
#  5 (15)
TREE = DraftTree(torch.tensor([10, 11, 12, 13, 14, 15, 16]), torch.tensor([-1, 0, 0, 1, 1, 3, 2]))


def test_branch_choice_second_branch():
    # Target wants 12 after the root, then 16, then 4: branch 2 -> 6, bonus 4.
    check(TREE, [12, 0, 16, 0, 0, 0, 4], path=[0, 2, 6], bonus=4)


def test_branch_choice_deepest_path():
    # 11 -> 13 -> 15 fully accepted; bonus is the argmax at node 5.
    check(TREE, [11, 13, 0, 15, 0, 8, 0], path=[0, 1, 3, 5], bonus=8)


def test_branch_choice_sibling_leaf():
    # 11 -> 14; node 4 is a leaf, so its argmax is the bonus.
    check(TREE, [11, 14, 0, 0, 19, 0, 0], path=[0, 1, 4], bonus=19)


def test_first_level_rejected_everywhere():
    check(TREE, [3, 13, 16, 15, 0, 0, 0], path=[0], bonus=3)


def test_duplicate_siblings_prefer_longer_then_lower_index():
    # Nodes 1 and 2 both carry 11; only node 2 has a child (13).
    tree = DraftTree(torch.tensor([10, 11, 11, 13]), torch.tensor([-1, 0, 0, 2]))
    check(tree, [11, 0, 13, 6], path=[0, 2, 3], bonus=6)  # the longer path wins
    check(tree, [11, 4, 5, 6], path=[0, 1], bonus=4)  # equal depth: the lower index wins


def test_hidden_rows_follow_path_not_prefix():
    outcome = check(TREE, [12, 0, 16, 0, 0, 0, 4], path=[0, 2, 6], bonus=4)
    assert outcome.hidden[:, 0].tolist() == [0.0, 2.0, 6.0]


# ---- property: greedy_path equals a brute-force definition ---------------------------------------------


@st.composite
def trees_and_argmax(draw):
    n = draw(st.integers(1, 16))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # few tokens: many matches
    argmax = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return DraftTree(torch.tensor(tokens), torch.tensor(parents)), argmax


@settings(max_examples=100, deadline=None)
@given(case=trees_and_argmax())
def test_greedy_path_matches_brute_force(case):
    tree, argmax = case
    tokens = tree.tokens.tolist()

    def accepted(i: int) -> bool:
        path = tree.path_to(i)
        return all(tokens[b] == argmax[a] for a, b in zip(path, path[1:]))

    best = max((i for i in range(len(tree)) if accepted(i)), key=lambda i: (len(tree.path_to(i)), -i))
    outcome = verify_greedy(tree, logits_with_argmax(argmax), node_hidden(len(tree)))
    assert outcome.path == tree.path_to(best)
    assert outcome.bonus == argmax[best]
    assert torch.equal(outcome.hidden, node_hidden(len(tree))[outcome.path])
