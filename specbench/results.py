"""Result files (DESIGN section 9): written by the runner, read by resume and by reports.

``<out>/answers/<drafter>.jsonl``: one line per finished question, a superset of Spec-Bench's answer
schema (its ``evaluation/speed.py`` and ``equal.py`` read it unchanged)::

    question_id, category, answer_id, model_id, tstamp, drafter,
    choices: [{index, turns (texts), new_tokens[turn], wall_time[turn], decoding_steps[turn],
               accept_lengths (every step, all turns, flattened),
               output_ids[turn], steps[turn] -> [{nodes, depth, accepted, stage_ms}],
               prefill_ms[turn], wall_time_repeats[turn]}],
    equal_to_vanilla, first_divergence[turn]

Lines are appended (and flushed to disk) only when a question is finished, so an interrupted run loses
at most the question in flight and ``--resume`` continues after the last complete line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from specbench.errors import SpecbenchError

ANSWERS = "answers"
MANIFEST = "manifest.json"
SUMMARY = "summary.csv"
REQUIRED_CHOICE_KEYS = ("turns", "new_tokens", "wall_time", "decoding_steps", "accept_lengths", "output_ids", "steps")


def answers_path(out: Path, drafter: str) -> Path:
    return Path(out) / ANSWERS / f"{drafter}.jsonl"


def append_answer(path: Path, record: dict) -> None:
    """Append one finished question and force it to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_answers(path: Path, drop_partial_tail: bool = False) -> list[dict]:
    """Parse an answers file; a malformed line raises `SpecbenchError` naming file and line.

    With ``drop_partial_tail`` a last line without its newline (a write cut short by a kill) is ignored
    and removed, so a resumed run appends after the last complete question.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if drop_partial_tail and text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        path.write_text(text, encoding="utf-8")
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            choice = record["choices"][0]
            missing = [key for key in REQUIRED_CHOICE_KEYS if key not in choice]
            if missing or "question_id" not in record or "category" not in record:
                raise KeyError(", ".join(missing) or "question_id/category")
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise SpecbenchError(f"{path}:{number}: malformed answer record ({exc})") from None
        records.append(record)
    return records


def load_run(out: Path) -> dict[str, list[dict]]:
    """Every drafter's answer records in a run directory, by drafter name (file stem)."""
    folder = Path(out) / ANSWERS
    if not folder.is_dir():
        raise SpecbenchError(f"{out} holds no {ANSWERS}/ folder: not a specbench run directory")
    runs = {path.stem: read_answers(path) for path in sorted(folder.glob("*.jsonl"))}
    if not runs:
        raise SpecbenchError(f"{folder} holds no answer files")
    return runs


def read_manifest(out: Path) -> dict | None:
    path = Path(out) / MANIFEST
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SpecbenchError(f"{path}: not valid JSON ({exc.msg})") from None


def write_json(path: Path, data: dict) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def first_divergence(ids: list[int], reference: list[int]) -> int | None:
    """Index of the first differing token, or None when equal (a length difference counts)."""
    for i, (a, b) in enumerate(zip(ids, reference)):
        if a != b:
            return i
    return None if len(ids) == len(reference) else min(len(ids), len(reference))
