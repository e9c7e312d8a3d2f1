"""Loading run directories for a report: answer files, manifest, a label, and checks that the records are
complete and consistent, so a report never silently compares different question sets.

A run is *incomplete* when its manifest lists drafters or questions that have no finished record (an
interrupted run). That is an error unless ``allow_incomplete`` is given; the report then says what is
missing. A record whose per-turn lists disagree (turn counts, step counts, accept lengths vs steps) is
*malformed*: always an error, naming the file and question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.results import ANSWERS, load_run, read_manifest

PER_TURN_KEYS = ("new_tokens", "wall_time", "decoding_steps", "output_ids", "steps")


@dataclass
class RunResults:
    """One run directory's records, by drafter, plus its manifest (None when absent) and label."""

    path: Path
    answers: dict[str, list[dict]]
    manifest: dict | None
    label: str = ""
    missing: dict[str, list] = field(default_factory=dict)  # drafter -> question ids without a record

    @property
    def slug(self) -> str:
        """The label as a file-name fragment."""
        return re.sub(r"[^A-Za-z0-9.]+", "-", self.label).strip("-").lower() or "run"

    @property
    def breakdown(self) -> bool | None:
        return ((self.manifest or {}).get("config") or {}).get("breakdown")


def check_record(path: Path, record: dict) -> None:
    """Raise `SpecbenchError` when one answer record's per-turn fields disagree with each other."""
    where = f"{path}: question {record['question_id']}"
    choice = record["choices"][0]
    turns = len(choice["turns"])
    if turns == 0:
        raise SpecbenchError(f"{where}: no turns")
    for key in PER_TURN_KEYS:
        if not isinstance(choice[key], list) or len(choice[key]) != turns:
            raise SpecbenchError(f"{where}: {key} has {len(choice[key]) if isinstance(choice[key], list) else '?'} "
                                 f"entries for {turns} turns (incomplete record)")
    flat = []
    for t, steps in enumerate(choice["steps"]):
        if len(steps) != choice["decoding_steps"][t]:
            raise SpecbenchError(f"{where}: turn {t + 1} has {len(steps)} step records but decoding_steps "
                                 f"{choice['decoding_steps'][t]}")
        flat += [step.get("accepted") for step in steps]
    if flat != list(choice["accept_lengths"]):
        raise SpecbenchError(f"{where}: accept_lengths disagree with the step records")
    if any(w is None or w <= 0 for w in choice["wall_time"]) or any(n <= 0 for n in choice["new_tokens"]):
        raise SpecbenchError(f"{where}: wall_time and new_tokens must be positive")


def _missing(answers: dict[str, list[dict]], manifest: dict | None) -> dict[str, list]:
    """Question ids each expected drafter lacks (expected: the manifest's lists, else the union of files)."""
    have = {name: [r["question_id"] for r in records] for name, records in answers.items()}
    union = list(dict.fromkeys(q for ids in have.values() for q in ids))
    expected_q = ((manifest or {}).get("data") or {}).get("questions") or union
    expected_d = ((manifest or {}).get("config") or {}).get("drafters") or list(answers)
    missing = {}
    for name in dict.fromkeys([*expected_d, *answers]):
        done = set(have.get(name, []))
        lacking = [q for q in expected_q if q not in done]
        if lacking:
            missing[name] = lacking
    return missing


def load_results(folder: Path, allow_incomplete: bool = False) -> RunResults:
    """Read and check one run directory."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SpecbenchError(f"run directory not found: {folder}")
    answers = load_run(folder)
    for name, records in answers.items():
        path = folder / ANSWERS / f"{name}.jsonl"
        seen = set()
        for record in records:
            if record["question_id"] in seen:
                raise SpecbenchError(f"{path}: question {record['question_id']} appears twice")
            seen.add(record["question_id"])
            check_record(path, record)
    manifest = read_manifest(folder)
    missing = _missing(answers, manifest)
    if missing and not allow_incomplete:
        detail = "; ".join(f"{name} lacks {len(ids)} ({', '.join(map(str, ids[:6]))}{', ...' if len(ids) > 6 else ''})"
                           for name, ids in missing.items())
        raise SpecbenchError(f"{folder} is incomplete: {detail}; finish it with the same `specbench run` command "
                             f"plus --resume, or pass --allow-incomplete to report what is there")
    return RunResults(folder, answers, manifest, missing=missing)


def _model_label(run: RunResults) -> str:
    model = (run.manifest or {}).get("model") or {}
    name = str(model.get("name") or run.path.resolve().name)
    return re.sub(r"\.gguf$", "", name)


def _device_label(run: RunResults) -> str:
    manifest = run.manifest or {}
    config, env = manifest.get("config") or {}, manifest.get("environment") or {}
    device = env.get("cuda_device") or config.get("device") or "?"
    return f"{device}, {config.get('dtype', '?')}"


def label_runs(runs: list[RunResults], labels: list[str] | None = None) -> None:
    """Name each run: given labels, else its model; add device and dtype, then the folder, to tell runs apart."""
    if labels is not None:
        if len(labels) != len(runs):
            raise SpecbenchError(f"--labels gives {len(labels)} names for {len(runs)} runs")
        chosen = labels
    else:
        chosen = [_model_label(run) for run in runs]
        if len(set(chosen)) < len(chosen):
            chosen = [f"{name} ({_device_label(run)})" for name, run in zip(chosen, runs)]
        if len(set(chosen)) < len(chosen):
            chosen = [f"{name} [{run.path.name}]" for name, run in zip(chosen, runs)]
    if len(set(chosen)) < len(chosen):
        raise SpecbenchError(f"run labels are not unique: {', '.join(chosen)}")
    for run, label in zip(runs, chosen):
        run.label = label


def load_runs(folders: list[Path], labels: list[str] | None = None, allow_incomplete: bool = False) -> list[RunResults]:
    """Every run directory, checked and labelled."""
    runs = [load_results(Path(folder), allow_incomplete) for folder in folders]
    label_runs(runs, labels)
    return runs
