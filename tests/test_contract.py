"""The drafter contract: every registered drafter, on a tiny random model, returns at every step a valid
`DraftTree` rooted at the target's choice, within the node budget, with token ids in the vocabulary,
and never touches the target's KV cache."""

from __future__ import annotations

import pytest
import torch

from conftest import PROMPTS
from specbench import DraftContext, DraftTree, VerifyOutcome
from specbench.harness.loop import generate
from specbench.registry import available_drafters, create_drafter

pytestmark = pytest.mark.usefixtures("single_thread")

NAMES = sorted(available_drafters())


class Recorder:
    """Wraps a drafter and checks each tree it returns before the loop sees it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.trees: list[DraftTree] = []
        self.budgets: list[int] = []

    def reset(self, target) -> None:
        self.vocab = target.config.vocab_size
        self.inner.reset(target)

    def propose(self, ctx: DraftContext) -> DraftTree:
        tokens_before = ctx.tokens.clone()
        tree = self.inner.propose(ctx)
        assert isinstance(tree, DraftTree)
        tree.validate(ctx.root, ctx.budget)  # raises SpecbenchError naming the broken rule
        assert 1 <= len(tree) <= ctx.budget
        assert tree.tokens.dtype == torch.long and tree.parents.dtype == torch.long
        assert int(tree.tokens.min()) >= 0 and int(tree.tokens.max()) < self.vocab
        if tree.probs is not None:
            assert tree.probs.shape[0] == len(tree)
        assert torch.equal(ctx.tokens, tokens_before), "a drafter must not write into ctx.tokens"
        self.trees.append(tree)
        self.budgets.append(ctx.budget)
        return tree

    def accept(self, outcome: VerifyOutcome) -> None:
        self.inner.accept(outcome)


@pytest.mark.parametrize("budget", [1, 4, 16])
@pytest.mark.parametrize("name", NAMES)
def test_registered_drafter_returns_valid_trees(tiny_target, reference, drafter_for, name, budget):
    recorder = Recorder(drafter_for(name, tiny_target))
    for prompt in PROMPTS[:3]:
        recorder.trees.clear()
        result = generate(tiny_target, recorder, prompt, 12, budget)
        assert len(recorder.trees) == len(result.steps) >= 1
        assert set(recorder.budgets) == {budget}
        if budget == 1:
            assert all(len(tree) == 1 for tree in recorder.trees)
        assert result.output_ids == reference(prompt, 12)
    check_parameter_count(name, recorder.inner)


#: Built-ins that train nothing: they add no parameters to the target (sps drafts with a frozen int8 copy).
TRAINING_FREE = {"vanilla", "ngram", "sps"}
#: Built-ins loaded from a checkpoint (here a tiny one made for the tiny target by `drafter_for`).
TRAINED = {"medusa", "hydra", "ctc", "ctc-ce", "eagle", "eagle3"}


def check_parameter_count(name: str, drafter) -> None:
    """A drafter loaded from a checkpoint reports the parameter count its training recipe recorded (the
    module it trained, > 0); a training-free built-in reports 0."""
    count = drafter.num_parameters()
    assert isinstance(count, int), f"{name}: num_parameters() returned {count!r}"
    recipe = getattr(drafter, "recipe", None)
    assert recipe or name not in TRAINED, f"{name}: no training recipe loaded"
    if recipe:
        assert count == recipe["parameters"] > 0, f"{name}: {count} parameters, its recipe records {recipe['parameters']}"
    elif name in TRAINING_FREE:
        assert count == 0, f"{name} trains nothing but reports {count} parameters"
    else:  # a third-party drafter without a recipe: only the type and sign are known
        assert count >= 0


@pytest.mark.parametrize("name", NAMES)
def test_registered_drafter_has_its_name(name):
    drafter = create_drafter(name)
    assert type(drafter).name == name
