"""One ``propose`` per built-in drafter at tree budget 16, in the middle of a real sequence.

Why: drafting is the part of a step each method adds; it is small next to the verify forward on this CPU
(0.03-0.06% of decode time for ngram, a few ms for the trained drafters), so a slowdown in a drafter's
heads, its per-sequence caches or its tree building is invisible in end-to-end speedups until it is
large. Here it is timed alone.

State: the demo prompt plus the first `ANSWER_TOKENS` tokens of its answer are prefilled, then the real
decode loop (`generate`) runs `DECODE_STEPS` steps with the drafter itself, so its per-sequence state
(ngram's index, Hydra's prefix cache, the CTC context cache) and the context (accepted hidden states,
tokens) are what they are mid-sequence. Each round first replays the drafter's recorded calls (reset,
then propose + accept per step; not timed), so every round times the same propose from the same state.
"""

from __future__ import annotations

import pytest

from benchmarks.benchlib import record_decode_state
from specbench.drafters.checkpointed import CHECKPOINTS, CheckpointDrafter
from specbench.registry import available_drafters, create_drafter, get_drafter_class

BUDGET = 16
ANSWER_TOKENS = 64  # the context is the 52-token prompt + 64 answer tokens, then the decode steps
DECODE_STEPS = 4
ROUNDS = 20


def ships_weights(name: str) -> bool:
    """A training-free drafter, or a trained one with a shipped checkpoint (eagle3 has none yet)."""
    kind = get_drafter_class(name)
    return not issubclass(kind, CheckpointDrafter) or any(CHECKPOINTS.glob(f"{kind.method}-*.json"))


#: the drafters specbench itself registers that can run on the default model, not plugins'
BUILT_IN = [name for name, source in available_drafters().items()
            if source.target.startswith("specbench.drafters.") and ships_weights(name)]


@pytest.mark.parametrize("name", BUILT_IN)
def test_propose(benchmark, target, transcript, name: str) -> None:
    """``drafter.propose(ctx)`` for the step after `DECODE_STEPS` real steps, at budget `BUDGET`."""
    drafter = create_drafter(name)
    prompt = transcript.ids(len(transcript.prompt_ids) + ANSWER_TOKENS)
    state = record_decode_state(target, drafter, prompt, DECODE_STEPS, BUDGET)
    ctx = state.next_context
    benchmark.group = "propose"

    def setup():
        state.restore(drafter)
        return (ctx,), {}

    tree = benchmark.pedantic(drafter.propose, setup=setup, rounds=ROUNDS, warmup_rounds=1)
    tree.validate(ctx.root, BUDGET)  # raises SpecbenchError naming the broken rule
    benchmark.extra_info.update(nodes=len(tree), depth=tree.max_depth(), context=len(ctx.tokens),
                                new_hidden=ctx.hidden.shape[0])
    if name == "vanilla":
        assert len(tree) == 1
    elif name != "ngram":  # trained drafters always fill the budget; ngram proposes only after a match
        assert len(tree) > 1
