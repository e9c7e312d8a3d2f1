"""Question files: any FastChat-format ``question.jsonl``, plus the names ``demo`` (the project's own
small set, packaged), ``mt_bench`` and ``spec_bench`` (``$SPECBENCH_DATA/<name>/question.jsonl``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from specbench.errors import SpecbenchError

NAMED_BENCHES = ("mt_bench", "spec_bench")
DEMO = "demo"


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    turns: tuple[str, ...]


def resolve_bench(bench: str) -> Path:
    """The question file for ``--bench``: ``demo``, ``mt_bench``, ``spec_bench`` or a path."""
    if bench == DEMO:
        return Path(str(files("specbench") / "data" / "demo" / "question.jsonl"))
    if bench in NAMED_BENCHES:
        root = os.environ.get("SPECBENCH_DATA")
        if not root:
            raise SpecbenchError(
                f"--bench {bench} needs SPECBENCH_DATA set to the folder holding {bench}/question.jsonl "
                f"(e.g. export SPECBENCH_DATA=../shared/data), or pass the file's path"
            )
        path = Path(root) / bench / "question.jsonl"
        if not path.is_file():
            raise SpecbenchError(f"--bench {bench}: {path} does not exist (check SPECBENCH_DATA={root})")
        return path
    path = Path(bench).expanduser()
    if not path.is_file():
        raise SpecbenchError(f"question file not found: {bench} (give a path, or demo, mt_bench, spec_bench)")
    return path


def load_questions(path: Path) -> list[Question]:
    """Parse a FastChat ``question.jsonl``; a bad line raises `SpecbenchError` naming file and line."""
    questions: list[Question] = []
    seen: set = set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecbenchError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(item, dict):
                raise SpecbenchError(f"{where}: expected a JSON object")
            qid, category, turns = item.get("question_id"), item.get("category"), item.get("turns")
            if not isinstance(qid, (int, str)) or isinstance(qid, bool):
                raise SpecbenchError(f"{where}: missing or invalid question_id")
            if not isinstance(category, str) or not category:
                raise SpecbenchError(f"{where}: missing or invalid category")
            if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
                raise SpecbenchError(f"{where}: turns must be a non-empty list of non-empty strings")
            if qid in seen:
                raise SpecbenchError(f"{where}: duplicate question_id {qid}")
            seen.add(qid)
            questions.append(Question(qid, category, tuple(turns)))
    if not questions:
        raise SpecbenchError(f"{path}: no questions")
    return questions


def select_questions(questions: list[Question], categories: list[str] | None, limit: int | None) -> list[Question]:
    """Keep ``categories`` (all when None), at most ``limit`` questions of each, in file order."""
    present = list(dict.fromkeys(q.category for q in questions))
    if categories:
        unknown = [c for c in categories if c not in present]
        if unknown:
            raise SpecbenchError(f"unknown categories {', '.join(unknown)}; this file has: {', '.join(present)}")
    kept: list[Question] = []
    count: dict[str, int] = {}
    for q in questions:
        if categories and q.category not in categories:
            continue
        if limit is not None and count.get(q.category, 0) >= limit:
            continue
        count[q.category] = count.get(q.category, 0) + 1
        kept.append(q)
    return kept
