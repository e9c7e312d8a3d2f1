"""Result files (docs/decisions.md, "Runs"): written by the runner, read by resume and by reports.

One question's record is an `Answer` (its steps are `Step`s); every module reads records through it, never
through the nested JSON. The JSON layout below is what `Answer.to_json` writes and `Answer.from_json` reads.

``<out>/answers/<drafter>.jsonl``: one line per finished question, a superset of Spec-Bench's answer
schema (its ``evaluation/speed.py`` and ``equal.py`` read it unchanged)::

    question_id, category, answer_id, model_id, tstamp, drafter,
    choices: [{index, turns (texts), new_tokens[turn], wall_time[turn], decoding_steps[turn],
               accept_lengths (every step, all turns, flattened),
               output_ids[turn], steps[turn] -> [{nodes, depth, accepted, stage_ms}],
               prefill_ms[turn], wall_time_repeats[turn]}],
    equal_to_vanilla, first_divergence[turn], tree_budget (the budget this drafter ran at),
    sampling {temperature, top_p, top_k, verify (the rule), lossless, typical_epsilon/delta (typical only)},
    seeds[turn] (each turn's random-stream seed; sampled runs only),
    attribution[turn] (greedy runs: {status: equal | near-tie | mismatch, and for a divergent turn the
                       fp32 margin, bound and largest token deficit; `specbench.harness.attribution`})

``equal_to_vanilla`` and ``first_divergence`` are claimed only for greedy runs (temperature 0): a sampled
answer is compared with vanilla by distribution, not by ids, so both are null there. They are claims, not
sources: summaries compute equality from the ids (`turn_outcomes`), and `load_run` refuses a file whose
claims (``equal_to_vanilla``, ``first_divergence``, ``attribution``'s status) disagree with its ids and
vanilla's (`check_claims`), naming the file, question and turn.

Lines are appended (and flushed to disk) only when a question is finished, so an interrupted run loses
at most the question in flight and ``--resume`` continues after the last complete line.

A finished run's answer files may be gzip-compressed (``answers/<drafter>.jsonl.gz``, e.g. ``gzip -9n``) to
keep committed runs small: `load_run`, and so the summary and ``specbench report``, read either form
(`answer_files`); a drafter with both a plain and a compressed file is refused as ambiguous. ``--resume`` on a
compressed run first decompresses its files in place (`reopen_compressed`), so it appends instead of rerunning.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from specbench.errors import SpecbenchError
from specbench.sampling import Sampling

ANSWERS = "answers"
MANIFEST = "manifest.json"
SUMMARY = "summary.csv"
BASELINE = "vanilla"  # the reference every drafter's speedup and ids are compared with
# How a greedy turn's ids compare with vanilla's (docs/decisions.md, "Divergence attribution"): equal, or
# different and explained by rounding (a near-tie in the target's fp32 logits), or not (a mismatch).
EQUAL, NEAR_TIE, MISMATCH = "equal", "near-tie", "mismatch"
STATUSES = (EQUAL, NEAR_TIE, MISMATCH)
UNATTRIBUTED = "unattributed"  # a divergent turn no fp32 re-score has looked at yet (`specbench attribute`)
ANSWER_SUFFIXES = (".jsonl", ".jsonl.gz")  # plain, and gzip-compressed (a finished run kept small)
REQUIRED_CHOICE_KEYS = ("turns", "new_tokens", "wall_time", "decoding_steps", "accept_lengths", "output_ids", "steps")


def drafter_order(names: Iterable[str]) -> list[str]:
    """Vanilla first, then the order given (duplicates dropped): the order of every table and chart."""
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda name: (name != BASELINE, names.index(name)))


@dataclass
class Step:
    """One verification step: tree size, deepest proposed depth (None in records that predate it),
    tokens emitted (accepted drafts + 1 bonus) and, in breakdown runs, milliseconds per stage."""

    nodes: int | None
    depth: int | None
    accepted: int
    stage_ms: dict[str, float] | None = None

    @classmethod
    def from_json(cls, data: dict) -> "Step":
        return cls(data.get("nodes"), data.get("depth"), data["accepted"], data.get("stage_ms"))

    def to_json(self) -> dict:
        return {"nodes": self.nodes, "depth": self.depth, "accepted": self.accepted, "stage_ms": self.stage_ms}

    @property
    def draft_ms(self) -> float:
        """The drafter's own cost this step: its propose stage plus the draft transform (CTC), if timed."""
        stages = self.stage_ms or {}
        return stages.get("draft", 0.0) + stages.get("transform", 0.0)


@dataclass
class Answer:
    """One drafter's record of one question (all its turns): the line of ``answers/<drafter>.jsonl``.

    Per-turn lists have one entry per turn. ``decoding_steps`` and ``accept_lengths`` (Spec-Bench's
    fields) are derived from ``steps``, so they cannot disagree with it. ``to_json`` writes Spec-Bench's
    layout (everything per turn under ``choices[0]``); keys this class does not know are kept as they are.
    """

    question_id: Any
    category: str
    drafter: str
    turns: list[str]                       # answer texts
    new_tokens: list[int]
    wall_time: list[float]                 # seconds (median of the repeats)
    output_ids: list[list[int]]
    steps: list[list[Step]]
    prefill_ms: list[float | None] = field(default_factory=list)
    wall_time_repeats: list[list[float]] = field(default_factory=list)
    first_divergence: list[int | None] | None = None  # None: not compared with vanilla
    model_id: str = ""
    answer_id: str = ""
    tstamp: float = 0.0
    tree_budget: int | None = None  # max tree nodes per step this drafter ran at (None: records before it)
    sampling: dict | None = None    # `Sampling.to_json()` of the run (None: records before it, all greedy)
    seeds: list[int] | None = None  # per-turn seeds of the random stream (sampled runs only)
    attribution: list[dict] | None = None  # per turn: {status, ...} (greedy runs, once attributed)
    extra: dict = field(default_factory=dict)          # unknown top-level keys, kept for round trips
    choice_extra: dict = field(default_factory=dict)   # unknown keys of choices[0]

    @property
    def decoding_steps(self) -> list[int]:
        return [len(turn) for turn in self.steps]

    @property
    def accept_lengths(self) -> list[int]:
        """Tokens emitted per step, every turn's steps in order (Spec-Bench's flattened list)."""
        return [step.accepted for turn in self.steps for step in turn]

    @property
    def equal_to_vanilla(self) -> bool | None:
        return None if self.first_divergence is None else all(d is None for d in self.first_divergence)

    def turn(self, index: int) -> "Answer":
        """The same record cut down to one turn (0-based)."""
        def one(values: list) -> list:
            return [values[index]] if len(values) > index else []

        per_turn = ("turns", "new_tokens", "wall_time", "output_ids", "steps", "prefill_ms", "wall_time_repeats")
        cut = {name: one(getattr(self, name)) for name in per_turn}
        divergence = None if self.first_divergence is None else one(self.first_divergence)
        attribution = None if self.attribution is None else one(self.attribution)
        return replace(self, **cut, first_divergence=divergence, attribution=attribution)

    def check(self) -> None:
        """Raise ValueError when the per-turn fields disagree with each other (an incomplete record)."""
        where = f"question {self.question_id}"
        count = len(self.turns)
        if count == 0:
            raise ValueError(f"{where}: no turns")
        for key in ("new_tokens", "wall_time", "output_ids", "steps"):
            values = getattr(self, key)
            if len(values) != count:
                raise ValueError(f"{where}: {key} has {len(values)} entries for {count} turns (incomplete record)")
        if any(w is None or w <= 0 for w in self.wall_time) or any(n <= 0 for n in self.new_tokens):
            raise ValueError(f"{where}: wall_time and new_tokens must be positive")

    @classmethod
    def from_json(cls, data: dict) -> "Answer":
        """Parse one line's object; KeyError/TypeError/ValueError name what is missing or inconsistent."""
        choice = data["choices"][0]
        missing = [key for key in REQUIRED_CHOICE_KEYS if key not in choice]
        missing += [key for key in ("question_id", "category") if key not in data]
        if missing:
            raise KeyError(", ".join(missing))
        steps = [[Step.from_json(step) for step in turn] for turn in choice["steps"]]
        known = {"question_id", "category", "drafter", "answer_id", "model_id", "tstamp", "choices",
                 "equal_to_vanilla", "first_divergence", "tree_budget", "sampling", "seeds", "attribution"}
        known_choice = {"index", "prefill_ms", "wall_time_repeats", *REQUIRED_CHOICE_KEYS}
        answer = cls(
            question_id=data["question_id"], category=data["category"], drafter=data.get("drafter", ""),
            turns=list(choice["turns"]), new_tokens=list(choice["new_tokens"]), wall_time=list(choice["wall_time"]),
            output_ids=[list(ids) for ids in choice["output_ids"]], steps=steps,
            prefill_ms=list(choice.get("prefill_ms") or []), wall_time_repeats=list(choice.get("wall_time_repeats") or []),
            first_divergence=data.get("first_divergence"), model_id=data.get("model_id", ""),
            answer_id=data.get("answer_id", ""), tstamp=data.get("tstamp", 0.0), tree_budget=data.get("tree_budget"),
            sampling=data.get("sampling"), seeds=data.get("seeds"), attribution=data.get("attribution"),
            extra={k: v for k, v in data.items() if k not in known},
            choice_extra={k: v for k, v in choice.items() if k not in known_choice},
        )
        answer.check()
        # Spec-Bench's fields are derived from the steps; a file's copies must agree with them.
        where = f"question {answer.question_id}"
        if len(choice["decoding_steps"]) != len(answer.turns):
            raise ValueError(f"{where}: decoding_steps has {len(choice['decoding_steps'])} entries for "
                             f"{len(answer.turns)} turns (incomplete record)")
        for t, (derived, stored) in enumerate(zip(answer.decoding_steps, choice["decoding_steps"])):
            if derived != stored:
                raise ValueError(f"{where}: turn {t + 1} has {derived} step records but decoding_steps {stored}")
        if answer.accept_lengths != list(choice["accept_lengths"]):
            raise ValueError(f"{where}: accept_lengths disagree with the step records")
        answer._check_own_claims(data.get("equal_to_vanilla"))
        return answer

    def _check_own_claims(self, recorded_equal: bool | None) -> None:
        """The claims a record makes about itself agree: ``equal_to_vanilla`` with ``first_divergence``,
        one ``first_divergence`` and ``attribution`` entry per turn. (Whether they agree with the ids is
        `check_claims`'s question: it needs vanilla's record.)"""
        where = f"question {self.question_id}"
        for key in ("first_divergence", "attribution"):
            values = getattr(self, key)
            if values is not None and len(values) != len(self.turns):
                raise ValueError(f"{where}: {key} has {len(values)} entries for {len(self.turns)} turns")
        if recorded_equal is None or recorded_equal == self.equal_to_vanilla:
            return
        if self.first_divergence is None:
            raise ValueError(f"{where}: equal_to_vanilla is {recorded_equal} but first_divergence is null")
        diverging = [t + 1 for t, d in enumerate(self.first_divergence) if d is not None]
        detail = f"turn {diverging[0]} has first_divergence {self.first_divergence[diverging[0] - 1]}" if diverging \
            else "no turn has a first_divergence"
        raise ValueError(f"{where}: equal_to_vanilla is {recorded_equal} but {detail}")

    def to_json(self) -> dict:
        """Spec-Bench's answer layout plus specbench's fields (docs/decisions.md, "Runs")."""
        return {
            "question_id": self.question_id,
            "category": self.category,
            "answer_id": self.answer_id,
            "model_id": self.model_id,
            "tstamp": self.tstamp,
            "drafter": self.drafter,
            "choices": [{
                "index": 0,
                "turns": self.turns,
                "new_tokens": self.new_tokens,
                "wall_time": self.wall_time,
                "decoding_steps": self.decoding_steps,
                "accept_lengths": self.accept_lengths,
                "output_ids": self.output_ids,
                "steps": [[step.to_json() for step in turn] for turn in self.steps],
                "prefill_ms": self.prefill_ms,
                "wall_time_repeats": self.wall_time_repeats,
                **self.choice_extra,
            }],
            "equal_to_vanilla": self.equal_to_vanilla,
            "first_divergence": self.first_divergence,
            **({} if self.tree_budget is None else {"tree_budget": self.tree_budget}),  # older records have none
            **({} if self.sampling is None else {"sampling": self.sampling}),
            **({} if self.seeds is None else {"seeds": self.seeds}),
            **({} if self.attribution is None else {"attribution": self.attribution}),
            **self.extra,
        }


def answers_path(out: Path, drafter: str) -> Path:
    return Path(out) / ANSWERS / f"{drafter}.jsonl"


#: a batch size B > 1 of a run (`--batch-size`) writes into `<out>/batch-B/` (its own answers/), batch 1 into `<out>`
BATCH_PREFIX = "batch-"


def batch_folder(out: Path, size: int) -> Path:
    """Where batch size ``size`` writes its answers: the run directory itself at 1, else ``<out>/batch-<size>``."""
    return Path(out) if size == 1 else Path(out) / f"{BATCH_PREFIX}{size}"


def batch_folders(out: Path) -> list[tuple[int, Path]]:
    """A run's batch sub-runs ``batch-B/`` (B > 1) that hold an answers/ folder, by batch size."""
    found = []
    for folder in Path(out).glob(f"{BATCH_PREFIX}*"):
        size = folder.name.removeprefix(BATCH_PREFIX)
        if size.isdigit() and int(size) > 1 and (folder / ANSWERS).is_dir():
            found.append((int(size), folder))
    return sorted(found)


def answer_files(folder: Path) -> dict[str, Path]:
    """Each drafter's answer file in an ``answers/`` folder, by drafter name, sorted by name: plain
    ``NAME.jsonl`` or compressed ``NAME.jsonl.gz``; a one-line error when a drafter has both."""
    files: dict[str, Path] = {}
    for suffix in ANSWER_SUFFIXES:
        for path in sorted(Path(folder).glob(f"*{suffix}")):
            name = path.name[: -len(suffix)]
            if name in files:
                raise SpecbenchError(f"{folder} holds both {files[name].name} and {path.name}: keep one")
            files[name] = path
    return dict(sorted(files.items()))


def read_text(path: Path) -> str:
    """An answer file's text, decompressed when its name ends in ``.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return handle.read()
        except (OSError, EOFError) as exc:
            raise SpecbenchError(f"{path}: not a readable gzip file ({exc})") from None
    return path.read_text(encoding="utf-8")


def reopen_compressed(folder: Path) -> list[Path]:
    """Decompress each ``NAME.jsonl.gz`` in an ``answers/`` folder into ``NAME.jsonl`` (the ``.gz`` removed),
    so that a resumed run appends to the records it already has instead of starting the drafter over.
    Returns the plain files written."""
    written = []
    for path in sorted(Path(folder).glob("*.jsonl.gz")):
        plain = path.with_suffix("")  # NAME.jsonl
        if plain.exists():
            raise SpecbenchError(f"{folder} holds both {plain.name} and {path.name}: keep one")
        plain.write_text(read_text(path), encoding="utf-8")
        path.unlink()
        written.append(plain)
    return written


def append_answer(path: Path, answer: Answer) -> None:
    """Append one finished question and force it to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(answer.to_json(), separators=(",", ":")) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_answers(path: Path, drop_partial_tail: bool = False, keep_file: bool = False) -> list[Answer]:
    """Parse an answers file; a malformed or inconsistent line raises `SpecbenchError` naming file and line.

    With ``drop_partial_tail`` a last line without its newline (a write cut short by a kill) is ignored
    and removed, so a resumed run appends after the last complete question; ``keep_file`` ignores it
    without touching the file (another process's file, in a sharded run). A ``.gz`` file is read
    decompressed and never rewritten.
    """
    path = Path(path)
    text = read_text(path)
    if drop_partial_tail and text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        if not keep_file and path.suffix != ".gz":
            path.write_text(text, encoding="utf-8")
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(Answer.from_json(json.loads(line)))
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise SpecbenchError(f"{path}:{number}: malformed answer record ({exc})") from None
    return records


def load_run(out: Path) -> dict[str, list[Answer]]:
    """Every drafter's answer records in a run directory, by drafter name (file stem), in the run's
    order (the manifest's ``--drafters``, vanilla first), files the manifest does not name last."""
    folder = Path(out) / ANSWERS
    if not folder.is_dir():
        raise SpecbenchError(f"{out} holds no {ANSWERS}/ folder: not a specbench run directory")
    files = answer_files(folder)
    runs = {name: read_answers(path) for name, path in files.items()}
    if not runs:
        raise SpecbenchError(f"{folder} holds no answer files")
    check_claims(runs, folder, files)
    listed = ((read_manifest(out) or {}).get("config") or {}).get("drafters") or []
    order = drafter_order([name for name in listed if name in runs] + list(runs))
    return {name: runs[name] for name in order}


def compared(record: Answer) -> bool:
    """Whether the record's ids are compared with vanilla's: greedy runs only (a sampled answer equals
    vanilla's in distribution, not in ids)."""
    return Sampling.from_json(record.sampling).greedy


def turn_outcomes(record: Answer, reference: Answer | None) -> list[str | None]:
    """Per turn, how ``record``'s ids compare with ``reference``'s (vanilla's record of the same question),
    computed from the ids themselves, never from the recorded claims: `EQUAL`; for different ids the
    recorded attribution's `NEAR_TIE` or `MISMATCH`, else `UNATTRIBUTED`; None where nothing is compared
    (a sampled record, no vanilla record for the question, or a turn vanilla's record lacks)."""
    if reference is None or not compared(record):
        return [None] * len(record.turns)
    outcomes = []
    for t, ids in enumerate(record.output_ids):
        if t >= len(reference.output_ids):
            outcomes.append(None)
        elif ids == reference.output_ids[t]:
            outcomes.append(EQUAL)
        else:
            status = ((record.attribution or [])[t:t + 1] or [{}])[0].get("status")
            outcomes.append(status if status in (NEAR_TIE, MISMATCH) else UNATTRIBUTED)
    return outcomes


def check_claims(runs: dict[str, list[Answer]], folder: Path | None = None,
                 files: dict[str, Path] | None = None) -> None:
    """Refuse (`SpecbenchError`, one line naming file, question and turn) a record whose recorded
    ``first_divergence`` or attribution status disagrees with its ids and vanilla's ids of the same question
    and turn (a hand-edited or corrupted file). Records with no claim (null) and questions vanilla has no
    record of are not checked; sampled records claim nothing. ``files``: each drafter's file, for the
    message (default ``folder/NAME.jsonl``)."""
    reference = {record.question_id: record for record in runs.get(BASELINE, [])}
    for name, records in runs.items():
        path = (str((files or {})[name]) if name in (files or {}) else
                f"{folder}/{name}.jsonl" if folder is not None else f"{ANSWERS}/{name}.jsonl")
        for record in records:
            base = reference.get(record.question_id)
            if base is None or not compared(record):
                continue
            for t, ids in enumerate(record.output_ids):
                if t >= len(base.output_ids):
                    continue
                actual = first_divergence(ids, base.output_ids[t])
                where = f"{path}: question {record.question_id} turn {t + 1}"
                ids_say = ("its output_ids equal vanilla's" if actual is None else
                           f"its output_ids and vanilla's first differ at token {actual}")
                if record.first_divergence is not None and record.first_divergence[t] != actual:
                    raise SpecbenchError(f"{where}: recorded first_divergence {record.first_divergence[t]} but "
                                         f"{ids_say} (a hand-edited or corrupted answer file)")
                claim = (record.attribution or [])[t:t + 1]
                if claim:
                    status, position = claim[0].get("status"), claim[0].get("position")
                    agrees = status == EQUAL if actual is None else (status in (NEAR_TIE, MISMATCH) and position == actual)
                    if not agrees:
                        raise SpecbenchError(f"{where}: recorded attribution {status!r}"
                                             f"{'' if position is None else f' at token {position}'} but {ids_say} "
                                             f"(a hand-edited or corrupted answer file)")


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
