"""Replay against a recorded greedy trajectory gives every registered drafter the accepted lengths of a
real run, step for step, without running the target; a drafter that leaves the trajectory is caught."""

from __future__ import annotations

import pytest
import torch

from conftest import build_tiny_model, make_target
from specbench.drafter import Drafter
from specbench.errors import SpecbenchError
from specbench.harness.autobudget.replay import TrajectoryTarget, replay
from specbench.harness.autobudget.trajectories import record_trajectory
from specbench.harness.loop import generate
from specbench.registry import available_drafters
from specbench.tree import DraftTree

PROMPTS = [[5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4], [60, 12, 60, 12, 60]]


@pytest.fixture(scope="module")
def llama():
    return make_target(build_tiny_model("llama"))


@pytest.fixture(scope="module")
def trajectories(llama):
    return [record_trajectory(llama, prompt, 40) for prompt in PROMPTS]


@pytest.mark.parametrize("name", sorted(available_drafters()))
@pytest.mark.parametrize("budget", [1, 4, 12])
def test_replay_equals_a_real_run_step_for_step(llama, trajectories, drafter_for, name, budget):
    drafter = drafter_for(name, llama)
    for prompt, trajectory in zip(PROMPTS, trajectories):
        real = generate(llama, drafter, prompt, 40, budget)
        replayed = replay(llama, drafter, trajectory, 40, budget)
        assert replayed.output_ids == real.output_ids
        assert [s.accepted for s in replayed.steps] == [s.accepted for s in real.steps]
        assert [s.nodes for s in replayed.steps] == [s.nodes for s in real.steps]
        assert all("draft" in s.stage_ms and "verify" in s.stage_ms for s in replayed.steps)


def test_the_trajectory_is_plain_greedy_with_its_hidden_states(llama, trajectories):
    trajectory = trajectories[0]
    with torch.inference_mode():
        ids = trajectory.ids
        out = llama.model(input_ids=ids[None], output_hidden_states=True)
    assert (out.logits[0, len(PROMPTS[0]) - 1 : -1].argmax(-1) == trajectory.continuation).all()
    torch.testing.assert_close(trajectory.hidden, llama.decoder(input_ids=ids[None]).last_hidden_state[0])


def test_the_stand_in_accepts_exactly_the_matching_chain(llama, trajectories):
    trajectory = trajectories[1]
    stand_in = TrajectoryTarget(llama, trajectory)
    stand_in.prefill(trajectory.prompt, stand_in.new_cache())
    c = trajectory.continuation.tolist()
    wrong = (c[2] + 1) % 100
    # root c0; chain c1 -> c2 matches, a sibling branch c1 -> wrong does not
    tree = DraftTree(torch.tensor([c[0], c[1], c[2], wrong]), torch.tensor([-1, 0, 1, 1]))
    logits, hidden = stand_in.forward_tree(tree, None)
    assert logits.argmax(-1).tolist() == [c[1], c[2], c[3], 0]
    assert (hidden[3] == 0).all() and torch.equal(hidden[2], trajectory.hidden[len(PROMPTS[1]) + 2])
    assert stand_in._past == len(PROMPTS[1]) + 3  # the next root, c3, sits after the accepted c0 c1 c2


class RootOnly(Drafter):
    """Drafts nothing: plain decoding through the stand-in."""

    def propose(self, ctx):
        return DraftTree.chain(ctx.root, [])


def test_a_replay_that_leaves_the_trajectory_is_an_error(llama, trajectories, monkeypatch):
    """A planted bug in the stand-in (it answers one token off after the fifth) is caught, not reported."""
    original = TrajectoryTarget._logits

    def off_by_one(self, next_tokens):
        shifted = [t + 1 if self._past > len(self.trajectory.prompt) + 4 else t for t in next_tokens]
        return original(self, shifted)

    monkeypatch.setattr(TrajectoryTarget, "_logits", off_by_one)
    with pytest.raises(SpecbenchError, match="left the recorded trajectory"):
        replay(llama, RootOnly(), trajectories[0], 40, 1)
