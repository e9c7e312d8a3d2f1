"""Shared set-up for the step-cost measurements: ``verify_cost.py`` and the pytest-benchmark suite
(``benchmarks/test_micro_*.py``, see docs/benchmarks.md).

- Verification trees of a given size and shape, a prefilled cache, and `rewind` (from `specbench.harness.autobudget.profile`,
  which `specbench profile` uses too), so every round verifies against exactly the same prefix.
- `record_decode_state`: a drafter's state after a prefill and a few real decode steps, recorded by
  running `specbench.harness.loop.generate` itself, and replayable so that every benchmark round proposes
  from the same state.
- `RecordingTarget` / `ReplayTarget`: run the decode loop once on the real target while recording every
  forward's outputs, then replay them, so the loop can be timed with the target forward taken out.

Scripts run as ``python benchmarks/NAME.py`` import it as ``benchlib`` (their folder is ``sys.path[0]``);
the pytest suite imports it as ``benchmarks.benchlib`` (see ``benchmarks/__init__.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch

from specbench import kv
from specbench.drafter import DraftContext, Drafter, TargetHandle
from specbench.harness.autobudget.profile import (  # noqa: F401 (re-exported)
    BUSHY_FANOUT,
    ROOT_TOKEN,
    TREE_SHAPES,
    prefilled_cache,
    rewind,
    synthetic_prefix,
    tree_of_size,
)
from specbench.harness.loop import TurnResult, generate
from specbench.model import TargetModel
from specbench.tree import DraftTree
from specbench.verify import VerifyOutcome


def first_turn_prompts(target: TargetModel, bench: str, count: int) -> list[list[int]]:
    """Prompt ids of the first turns of the first ``count`` questions of ``bench`` (chat template applied)."""
    from specbench.prompts import PromptBuilder
    from specbench.questions import load_questions, resolve_bench

    builder = PromptBuilder(target.tokenizer)
    return [builder.build(q.turns[:1], []) for q in load_questions(resolve_bench(bench))[:count]]


def rotating_medians(timed: dict[Hashable, Callable[[], float]], rounds: int) -> dict[Hashable, float]:
    """Median of what each of ``timed``'s calls returns (ms), over ``rounds`` rounds after an untimed one that warms
    every condition up; each round calls every condition once, the order shifted by one per round, so the machine's
    drift lands on every condition alike."""
    names = list(timed)
    times: dict[Hashable, list[float]] = {name: [] for name in names}
    with torch.inference_mode():
        for round_number in range(rounds + 1):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                elapsed = timed[name]()
                if round_number:
                    times[name].append(elapsed)
    return {name: statistics.median(samples) for name, samples in times.items()}


# ---- a drafter's state after a few decode steps -------------------------------------------------------


def _quiet_span(name: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def _frozen(ctx: DraftContext) -> DraftContext:
    """``ctx`` with its token view copied (the loop's buffer is reused) and a no-op sub-stage timer."""
    return dataclasses.replace(ctx, tokens=ctx.tokens.clone(), span=_quiet_span)


class _StopDecoding(Exception):
    pass


class _Recorder(Drafter):
    """Passes every call to ``inner`` and records it; at propose number ``steps + 1`` it records the context
    and stops the loop (by raising), so the decode state is captured right before that propose."""

    def __init__(self, inner: Drafter, steps: int) -> None:
        super().__init__()
        self.inner, self.steps = inner, steps
        self.contexts: list[DraftContext] = []
        self.outcomes: list[VerifyOutcome] = []

    def reset(self, target: TargetHandle) -> None:
        self.inner.reset(target)

    def propose(self, ctx: DraftContext) -> DraftTree:
        self.contexts.append(_frozen(ctx))
        if len(self.contexts) > self.steps:
            raise _StopDecoding
        return self.inner.propose(ctx)

    def accept(self, outcome: VerifyOutcome) -> None:
        self.outcomes.append(outcome)
        self.inner.accept(outcome)


@dataclass
class DecodeState:
    """What a drafter saw during ``len(outcomes)`` decode steps of one sequence, and the context of the next
    propose. `restore` replays the drafter's own calls (reset, then propose + accept per step), which brings
    any drafter back to the state it had before that next propose, without the target."""

    handle: TargetHandle
    contexts: list[DraftContext]  # one per recorded step
    outcomes: list[VerifyOutcome]  # one per recorded step
    next_context: DraftContext

    def restore(self, drafter: Drafter) -> None:
        drafter.reset(self.handle)
        for ctx, outcome in zip(self.contexts, self.outcomes):
            drafter.propose(ctx)
            drafter.accept(outcome)


def record_decode_state(target: TargetModel, drafter: Drafter, prompt_ids: list[int], steps: int,
                        budget: int) -> DecodeState:
    """Run the real decode loop (`generate`) with ``drafter`` at ``budget``: prefill ``prompt_ids``, then
    ``steps`` steps, and stop right before the next propose. Raises if the sequence ends sooner."""
    recorder = _Recorder(drafter, steps)
    try:
        generate(target, recorder, prompt_ids, max_new_tokens=(steps + 1) * budget + 1, budget=budget)
    except _StopDecoding:
        return DecodeState(target.handle, recorder.contexts[:steps], recorder.outcomes, recorder.contexts[steps])
    raise RuntimeError(f"the sequence ended before {steps} decode steps; use a longer prompt or fewer steps")


# ---- the decode loop with the target forward taken out ------------------------------------------------


@dataclass
class Tape:
    """Every target output of one `generate` call, in call order."""

    prefill: tuple[torch.Tensor, torch.Tensor]  # logits [V], hidden [L, H]
    steps: list[tuple[torch.Tensor, torch.Tensor]]  # per step: logits [n, V], hidden [n, H]


class RecordingTarget:
    """The real target, recording what its prefill and tree forwards return onto `tape`."""

    def __init__(self, target: TargetModel) -> None:
        self.target = target
        self.device, self.eos_ids, self.handle = target.device, target.eos_ids, target.handle
        self.tape: Tape | None = None

    def new_cache(self):
        return self.target.new_cache()

    def prepare_drafter(self, drafter):
        return self.target.prepare_drafter(drafter)

    def prefill(self, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.target.prefill(input_ids, cache)  # [V], [L, H]
        self.tape = Tape(prefill=out, steps=[])
        return out

    def forward_tree(self, tree: DraftTree, cache) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.target.forward_tree(tree, cache)  # [n, V], [n, H]
        self.tape.steps.append(out)
        return out


class ReplayTarget:
    """Stands in for the target in `generate`: returns the recorded outputs in order, computing nothing.

    Valid only for the recorded prompt and a deterministic drafter (the same trees in the same order).
    The cache stays empty (`kv.commit_path` skips empty layers; for the root-only trees of vanilla decoding
    it returns before touching the cache anyway)."""

    def __init__(self, tape: Tape, recorded_from: RecordingTarget | TargetModel) -> None:
        self.tape = tape
        self.device, self.eos_ids, self.handle = recorded_from.device, recorded_from.eos_ids, recorded_from.handle
        self._next = 0

    def new_cache(self):
        self._next = 0  # `generate` makes one cache per sequence: the tape starts over
        return kv.new_cache()

    def prepare_drafter(self, drafter):
        return None  # a replayed target runs no regime: the drafter as it is

    def prefill(self, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tape.prefill

    def forward_tree(self, tree: DraftTree, cache) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.tape.steps[self._next]
        self._next += 1
        return out


def record_turn(target: TargetModel, drafter: Drafter, prompt_ids: list[int], max_new_tokens: int,
                budget: int = 1) -> tuple[TurnResult, Tape]:
    """One real `generate` call, with its target outputs on a `Tape` for `ReplayTarget`."""
    recording = RecordingTarget(target)
    result = generate(recording, drafter, prompt_ids, max_new_tokens, budget)
    return result, recording.tape
