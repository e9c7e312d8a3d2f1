"""Stage timing for the decode loop.

Stages (docs/decisions.md, "Timing"): ``prefill``, ``draft`` (drafter.propose, minus its ``transform`` sub-stage),
``transform``, ``verify`` (target tree forward), ``accept`` (compare + KV commit + drafter.accept);
``other`` is the turn's wall time minus their sum. On CUDA each stage records a pair of events and no
host sync happens inside the loop; the events are read once at the end of the turn. On CPU the marks
are ``time.perf_counter`` values. With timing disabled every stage is a shared no-op context.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

STAGES = ("prefill", "draft", "transform", "verify", "accept")
_NOOP = nullcontext()


class _Mark(AbstractContextManager):
    __slots__ = ("timer", "name", "start")

    def __init__(self, timer: "StageTimer", name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> "_Mark":
        self.start = self.timer._now()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.timer._marks.append((self.timer._step, self.name, self.start, self.timer._now()))


#: sub-stages of the draft stage recorded apart from it: ``transform`` (CTC's draft transform, the drafter's own
#: cost, counted in `specbench.results.Step.draft_ms`) and ``replayed_target`` (a drafter running the target
#: itself for state a real run's forwards record for free, as eagle3 does when no forward recorded its layer
#: taps: not the drafter's cost)
SUB_STAGES = ("transform", "replayed_target")


class StageTimer:
    """Collects (step, stage, start, end) marks for one turn; `per_step_ms` resolves them."""

    def __init__(self, device: torch.device | str, enabled: bool) -> None:
        self.enabled = enabled
        self.cuda = torch.device(device).type == "cuda"
        self._marks: list[tuple[int, str, Any, Any]] = []
        self._step = -1  # -1 = before the first step (prefill)

    def _now(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stage(self, name: str) -> AbstractContextManager:
        return _Mark(self, name) if self.enabled else _NOOP

    span = stage  # sub-stages (``ctx.span("transform")``) are recorded the same way

    def next_step(self) -> None:
        self._step += 1

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) if self.cuda else (end - start) * 1000.0

    def per_step_ms(self) -> tuple[float, list[dict[str, float]]]:
        """(prefill ms, one {stage: ms} dict per step); draft excludes its sub-stages (`SUB_STAGES`)."""
        if self.cuda and self._marks:
            torch.cuda.synchronize()
        prefill = 0.0
        steps: list[dict[str, float]] = [dict() for _ in range(self._step + 1)]
        for step, name, start, end in self._marks:
            ms = self._elapsed_ms(start, end)
            if step < 0:
                prefill += ms
            else:
                steps[step][name] = steps[step].get(name, 0.0) + ms
        for times in steps:
            for sub in SUB_STAGES:
                if sub in times and "draft" in times:
                    times["draft"] -= times[sub]
        return prefill, steps


def wall_clock(device: torch.device | str) -> float:
    """Seconds, after waiting for queued GPU work so the wall time covers it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()
