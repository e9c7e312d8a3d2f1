"""The calibration set `--tree-budget auto` chooses budgets on, and its greedy trajectories, cached.

The shipped set (``specbench/data/calibration/question.jsonl``, made by
``scripts/make_calibration_set.py``) is 16 held-out ShareGPT prompts: no benchmark question, and no
shipped drafter was trained on them. Any FastChat-format question file can replace it
(``--calibration FILE``). Every turn a file holds is decoded as a run decodes it: a later turn's prompt
carries the greedy answers before it. (A two-turn shipped set was measured and not kept:
docs/performance.md, "Where the prediction misses".)

``--calibration heldout`` calibrates on the run's own benchmark instead: the last `HELDOUT_PER_CATEGORY`
questions of each of the run's categories that the run does not answer (so it needs ``--limit`` to leave
some out). Drafters trained on ShareGPT accept more on held-out ShareGPT than on a benchmark, so the
shipped set predicts their speedups high; questions of the benchmark's own kind, disjoint from the
timed ones, remove that shift (measured in docs/performance.md).

**The default** (no ``--calibration``) is the held-out questions when the run leaves at least one question
of every one of its categories out, and the shipped set otherwise (a run over whole categories);
``--calibration shipped`` asks for the shipped set always. The manifest's ``calibration.source`` says
which was used (docs/decisions.md, "Hardware").

The set's greedy trajectories are cached under ``$SPECBENCH_CACHE/calibration/`` (`trajectories`):
recorded once and shared by every drafter and budget.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.errors import SpecbenchError
from specbench.questions import Question, load_questions, resolve_bench, select_questions

if TYPE_CHECKING:  # the CLI reads this module's constants; torch loads only when calibrating
    from specbench.harness.autobudget.trajectories import Trajectory

#: tokens per calibration answer at most (a run's own cap when smaller): enough steps for a stable tau
CALIBRATION_TOKENS = 128
HELDOUT = "heldout"  # --calibration heldout: the benchmark's questions the run leaves out
SHIPPED = "shipped"  # --calibration shipped: the package's 16 held-out ShareGPT prompts
HELDOUT_PER_CATEGORY = 2  # ... at most this many of each category (the last ones in the file)


def default_calibration_file() -> Path:
    return Path(str(resources.files("specbench") / "data" / "calibration" / "question.jsonl"))


def _left_out(bench: str, categories: list[str] | None, limit: int | None) -> tuple[list[str], dict[str, list[Question]]]:
    """(the run's categories, the questions of each that a run with these settings does not answer)."""
    every = select_questions(load_questions(resolve_bench(bench)), categories, None)
    answered = {q.question_id for q in select_questions(every, None, limit)}
    left: dict[str, list[Question]] = {}
    for question in every:
        if question.question_id not in answered:
            left.setdefault(question.category, []).append(question)
    return list(dict.fromkeys(q.category for q in every)), left


def heldout_questions(bench: str, categories: list[str] | None, limit: int | None,
                      per_category: int = HELDOUT_PER_CATEGORY) -> list[Question]:
    """The last ``per_category`` questions of each of the run's categories that a run with these settings does
    not answer; a one-line error when it answers them all."""
    _, left = _left_out(bench, categories, limit)
    if not left:
        raise SpecbenchError("--calibration heldout needs questions the run leaves out; it answers every question of "
                             "its categories (leave some out with --limit)")
    return [question for kept in left.values() for question in kept[-per_category:]]


def calibration_source(calibration: str | None, bench: str, categories: list[str] | None, limit: int | None) -> str:
    """What `auto` calibrates on: ``calibration`` when given (`HELDOUT`, `SHIPPED`, a file or benchmark name);
    by default `HELDOUT` when the run leaves a question of each of its categories out, else `SHIPPED`."""
    if calibration is not None:
        return calibration
    run_categories, left = _left_out(bench, categories, limit)
    return HELDOUT if all(category in left for category in run_categories) else SHIPPED


def calibration_file(source: str, bench: str, categories: list[str] | None, limit: int | None, root: Path) -> Path:
    """The question file of a `calibration_source`: the shipped set, a file or benchmark name, or for
    `HELDOUT` the run's left-out questions, written under ``root/calibration/`` (named by their content)."""
    if source == SHIPPED:
        return default_calibration_file()
    if source != HELDOUT:
        return resolve_bench(source)
    lines = "".join(json.dumps({"question_id": q.question_id, "category": q.category, "turns": list(q.turns)},
                               ensure_ascii=False) + "\n" for q in heldout_questions(bench, categories, limit))
    path = root / "calibration" / f"heldout-{hashlib.sha256(lines.encode()).hexdigest()[:16]}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(lines, encoding="utf-8")
    return path


def calibration_trajectories(target, prompts, calibration: Path, max_new_tokens: int, template: str | None,
                             root: Path) -> tuple[list[Trajectory], dict]:
    """(one trajectory per turn of every calibration question, the cache key); recorded or read from the
    cache. ``prompts`` is the run's `PromptBuilder`."""
    from specbench.harness.autobudget.trajectories import cached_trajectories

    by_question, key, _ = cached_trajectories(target, prompts, load_questions(calibration), max_new_tokens, template,
                                              root / "calibration")
    return [trajectory for turns in by_question for trajectory in turns], key
