"""Loading run directories for a report: answer files, manifest, a label, and checks that the records are
complete and consistent, so a report never silently compares different question sets.

A run is *incomplete* when its manifest lists drafters or questions that have no finished record (an
interrupted run). That is an error unless ``allow_incomplete`` is given; the report then says what is
missing. A record whose per-turn lists disagree (turn counts, step counts, accept lengths vs steps) is
*malformed*: always an error, naming the file and question (`specbench.results.Answer.from_json` checks it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.results import ANSWERS, BASELINE, Answer, answer_files, batch_folders, load_run, read_manifest
from specbench.sampling import Sampling


@dataclass
class RunResults:
    """One run directory's records, by drafter, plus its manifest (None when absent) and label."""

    path: Path
    answers: dict[str, list[Answer]]
    manifest: dict | None
    label: str = ""
    missing: dict[str, list] = field(default_factory=dict)  # drafter -> question ids without a record

    @property
    def slug(self) -> str:
        """The label as a file-name fragment."""
        return re.sub(r"[^A-Za-z0-9]+", "-", self.label).strip("-").lower() or "run"  # no dots: chart files get suffixes

    @property
    def breakdown(self) -> bool | None:
        return ((self.manifest or {}).get("config") or {}).get("breakdown")

    @property
    def sampling(self) -> Sampling:
        """The run's sampling settings (from its records; greedy for records from before sampling)."""
        for records in self.answers.values():
            for record in records:
                return Sampling.from_json(record.sampling)
        return Sampling()

    @property
    def sampling_label(self) -> str:
        return self.sampling.label()


def lossy_name(name: str, records: list[Answer]) -> str:
    """A drafter's name as reports show it: marked when its answers come from a lossy rule (vanilla, which
    proposes nothing, is exact under any rule and stays the reference)."""
    rules = {Sampling.from_json(record.sampling) for record in records}
    lossy = sorted({s.rule for s in rules if not s.lossless})
    return f"{name} ({'/'.join(lossy)}, lossy)" if lossy and name != BASELINE else name


def _missing(answers: dict[str, list[Answer]], manifest: dict | None) -> dict[str, list]:
    """Question ids each expected drafter lacks (expected: the manifest's lists, else the union of files)."""
    have = {name: [r.question_id for r in records] for name, records in answers.items()}
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
    sub_runs = batch_folders(folder)
    if sub_runs and not (folder / ANSWERS).is_dir():  # `--batch-size` without 1: each size is its own sub-run
        raise SpecbenchError(f"{folder} ran batch sizes {', '.join(str(size) for size, _ in sub_runs)} only (no batch "
                             f"1 beside them): report a size with `specbench report {sub_runs[0][1]}`, or add batch 1 "
                             f"with the same `specbench run` command plus --batch-size 1,... and --resume")
    answers = load_run(folder)
    files = answer_files(folder / ANSWERS)
    for name, records in answers.items():
        path = files.get(name, folder / ANSWERS / f"{name}.jsonl")
        seen = set()
        for record in records:
            if record.question_id in seen:
                raise SpecbenchError(f"{path}: question {record.question_id} appears twice")
            seen.add(record.question_id)
    manifest = read_manifest(folder)
    missing = _missing(answers, manifest)
    answers = {lossy_name(name, records): records for name, records in answers.items()}
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


def run_regime(run: RunResults) -> str:
    """The run's regime (`--regime`): eager unless its manifest records another."""
    manifest = run.manifest or {}
    return str((manifest.get("regime") or {}).get("name") or (manifest.get("config") or {}).get("regime") or "eager")


def _device_label(run: RunResults) -> str:
    manifest = run.manifest or {}
    config, env = manifest.get("config") or {}, manifest.get("environment") or {}
    device = env.get("cuda_device") or config.get("device") or "?"
    return f"{device}, {config.get('dtype', '?')}"


def label_runs(runs: list[RunResults], labels: list[str] | None = None) -> None:
    """Name each run: given labels, else its model (and its regime when any run is compiled); add device and
    dtype, then the folder, to tell runs apart."""
    if labels is not None:
        if len(labels) != len(runs):
            raise SpecbenchError(f"--labels gives {len(labels)} names for {len(runs)} runs")
        chosen = labels
    else:
        chosen = [_model_label(run) for run in runs]
        if any(run_regime(run) != "eager" for run in runs):  # a compiled run's numbers always say so
            chosen = [f"{name}, {run_regime(run)}" for name, run in zip(chosen, runs)]
        if len(set(chosen)) < len(chosen) and len({run.sampling for run in runs}) > 1:
            chosen = [f"{name}, {run.sampling_label}" for name, run in zip(chosen, runs)]
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
