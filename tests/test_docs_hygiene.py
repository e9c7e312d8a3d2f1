"""The README and the reference docs speak generically: no dates, session numbers or "this machine" talk
(those belong in docs/journal/, which keeps the history), and hub commands the installed client has
(``hf download``, not the removed ``huggingface-cli``). Dates inside paths (run folders named by date) are
names, not talk, and pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: reference docs whose owners have yet to rewrite their dated passages (each is checked for hub commands)
PENDING: set[str] = set()
TALK = [
    (re.compile(r"(?<![\w/.-])20\d\d-\d\d-\d\d(?![\w/-])"), "a date"),
    (re.compile(r"\b[Ss]ession \d+|\bsession\s+s?\d+\b"), "a session number"),
    (re.compile(r"\bthis (?:\d-core |CPU-only )?(?:machine|CPU|Xeon|EPYC)\b|the project's machine"), "this machine"),
]


def reference_docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", [p for p in reference_docs() if p.name not in PENDING], ids=lambda p: p.name)
def test_no_machine_or_date_talk_outside_the_journal(path):
    found = [f"{path.name}:{number}: {why}: {line.strip()[:100]}" for number, line in prose_lines(path)
             for pattern, why in TALK if pattern.search(line)]
    assert not found, "\n".join(found)


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, line) outside fenced blocks: a fence quotes commands or what a program printed, not talk."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


@pytest.mark.parametrize("path", reference_docs(), ids=lambda p: p.name)
def test_hub_commands_are_the_current_clients(path):
    assert "huggingface-cli" not in path.read_text(encoding="utf-8"), f"{path.name}: use `hf download`"


def test_the_patterns_catch_what_they_are_for():
    samples = ["measured on 2026-11-24 here", "as in session 25's run", "on this 2-core Xeon", "on this CPU",
               "the project's machine"]
    assert all(any(p.search(s) for p, _ in TALK) for s in samples)
    assert not any(p.search("docs/training-runs/cpu-2026-11-23/ctc") for p, _ in TALK)


def test_fenced_output_is_not_prose(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("on this CPU\n```text\nspecbench: no profile for this machine yet\n```\nafter\n")
    assert prose_lines(doc) == [(1, "on this CPU"), (5, "after")]
