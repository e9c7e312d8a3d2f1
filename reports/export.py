"""Export a specbench run as Spec-Bench answer files, so Spec-Bench's own ``evaluation/speed.py`` and
``evaluation/equal.py`` can be run on it unchanged (see docs/spec-bench.md).

Spec-Bench's inference scripts write ``data/<bench>/model_answer/<model_id>.jsonl`` (one JSON line per
question, sorted by question id) and name a method ``<model>-<method>-<dtype>-temp-<T>``; its baseline is
the method ``vanilla`` (``vicuna-7b-v1.3-vanilla-float16-temp-0.0``). This module writes one such file per
drafter under ``<out_dir>/<bench>/model_answer/``; specbench's own ``vanilla`` drafter is the baseline
file. ``out_dir`` plays the part of Spec-Bench's ``data/`` folder, so ``--out <Spec-Bench>/data`` puts the
files exactly where ``eval.sh`` would.

Each line holds only Spec-Bench's answer fields (question_id, category, answer_id, model_id, tstamp,
choices[0]: index, turns, decoding_steps, new_tokens, wall_time, accept_lengths), copied unchanged, so
Spec-Bench's mean accepted tokens equals specbench's tau exactly. Its speedup differs from specbench's
``speedup_mean_throughput`` only because speed.py re-counts the *baseline's* tokens from the answer text
with a tokenizer instead of reading ``new_tokens`` (docs/spec-bench.md explains the bias).

Every access to a record's fields is in `_spec_bench_record`, the one place to change when records
change shape.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from specbench.errors import SpecbenchError
from specbench.results import BASELINE, Answer, load_run, read_manifest

#: specbench decodes greedily; Spec-Bench writes this as ``temp-0.0``.
TEMPERATURE = 0.0


def spec_bench_model_id(model: str, drafter: str, dtype: str, temperature: float = TEMPERATURE) -> str:
    """Spec-Bench's model id, ``<model>-<method>-<dtype>-temp-<T>`` (its eval.sh, e.g.
    ``vicuna-7b-v1.3-vanilla-float16-temp-0.0``); the file is ``<model_id>.jsonl``."""
    return f"{model}-{drafter}-{dtype}-temp-{float(temperature)}"


def _spec_bench_record(record: Answer, model_id: str) -> tuple[Any, dict]:
    """(question_id, the Spec-Bench answer line) of one specbench answer record.

    The only function that reads a record's fields: Spec-Bench's top-level fields plus the six of
    ``choices[0]`` its scripts know, values unchanged (``accept_lengths`` flattened over turns, as
    Spec-Bench writes it). specbench's own fields (output_ids, steps, ...) are left out.
    """
    line = {
        "question_id": record.question_id,
        "category": record.category,
        "answer_id": record.answer_id,
        "model_id": model_id,
        "choices": [{
            "index": 0,
            "turns": list(record.turns),
            "decoding_steps": list(record.decoding_steps),
            "new_tokens": list(record.new_tokens),
            "wall_time": list(record.wall_time),
            "accept_lengths": list(record.accept_lengths),
        }],
        "tstamp": record.tstamp,
    }
    return record.question_id, line


def _run_identity(run_dir: Path, model: str | None, dtype: str | None, bench: str | None) -> tuple[str, str, str]:
    """(model name, dtype, bench name) for the file names: the arguments given, else the run's manifest.

    The bench name is the folder of the question file (Spec-Bench keeps ``data/<bench>/question.jsonl``),
    so ``--bench mt_bench`` gives ``mt_bench`` and a custom ``.../my_set/question.jsonl`` gives ``my_set``.
    """
    if model and dtype and bench:
        return model, dtype, bench
    manifest = read_manifest(run_dir)
    if manifest is None:
        raise SpecbenchError(f"{run_dir} has no manifest.json; give the model name, dtype and bench explicitly")
    try:
        config = manifest["config"]
        data_path = Path(manifest["data"]["path"])
        model = model or manifest["model"]["name"]
        dtype = dtype or config["dtype"]
        bench = bench or (data_path.parent.name if data_path.name == "question.jsonl" else data_path.stem)
    except (KeyError, TypeError) as exc:
        raise SpecbenchError(f"{run_dir}/manifest.json lacks {exc}; give the model name, dtype and bench explicitly") from None
    if not model:
        raise SpecbenchError(f"{run_dir}/manifest.json names no model; give the model name for the file names")
    return str(model), str(dtype), str(bench)


def _write_jsonl(path: Path, lines: list[dict]) -> None:
    """Write ``lines`` as JSON lines, atomically: a temporary file beside ``path``, then a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def export_spec_bench(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    drafters: Sequence[str] | None = None,
    *,
    model: str | None = None,
    dtype: str | None = None,
    bench: str | None = None,
    paired: bool = True,
) -> list[Path]:
    """Write the run's answers as Spec-Bench answer files; returns their paths, the baseline first.

    Files: ``<out_dir>/<bench>/model_answer/<model>-<drafter>-<dtype>-temp-0.0.jsonl`` for ``vanilla``
    (the baseline, always written) and every drafter in ``drafters`` (default: all in the run). Lines are
    sorted by question id, as Spec-Bench's ``reorg_answer_file`` leaves them. ``model``, ``dtype`` and
    ``bench`` default to the run's manifest.

    With ``paired`` (default) only questions finished by the baseline and every exported drafter are
    written: speed.py averages each file separately and equal.py compares the files line by line, so
    both are only meaningful on the same questions (an interrupted run can differ by one question).

    Raises `SpecbenchError` (one line) for a directory that is no run, a drafter the run lacks, a run
    without ``vanilla``, a missing manifest (unless ``model``, ``dtype`` and ``bench`` are given), or an
    output folder that cannot be written.
    """
    run_dir = Path(run_dir)
    runs = load_run(run_dir)
    wanted = list(runs) if drafters is None else list(dict.fromkeys(drafters))
    if BASELINE not in runs:
        raise SpecbenchError(f"{run_dir} has no {BASELINE} answers: Spec-Bench's speed.py needs the baseline file")
    missing = [name for name in wanted if name not in runs]
    if missing:
        raise SpecbenchError(f"{run_dir} has no answers for drafter(s) {', '.join(missing)}; it has {', '.join(runs)}")
    names = [BASELINE, *[name for name in wanted if name != BASELINE]]
    model, dtype, bench = _run_identity(run_dir, model, dtype, bench)

    converted = {}
    for name in names:
        model_id = spec_bench_model_id(model, name, dtype)
        converted[name] = (model_id, dict(_spec_bench_record(record, model_id) for record in runs[name]))
    keep = set.intersection(*(set(lines) for _, lines in converted.values())) if paired else None

    folder = Path(out_dir) / bench / "model_answer"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for model_id, lines in converted.values():
            ids = sorted(qid for qid in lines if keep is None or qid in keep)
            path = folder / f"{model_id}.jsonl"
            _write_jsonl(path, [lines[qid] for qid in ids])
            written.append(path)
    except OSError as exc:
        raise SpecbenchError(f"cannot write Spec-Bench files to {folder}: {exc.strerror or exc}") from None
    return written


def spec_bench_tokenizer(run_dir: str | os.PathLike) -> Path:
    """A Hugging Face tokenizer folder for the run's model, to give speed.py as ``tokenizer``.

    A model directory is its own tokenizer folder; a GGUF file's is specbench's converted copy of it
    (`specbench.model_source.converted_copy`, made on first use, ~15 s). Raises `SpecbenchError` when the run's
    model file is no longer there or changed since the run.
    """
    from specbench.model_source import ModelSource, converted_copy, file_sha256

    manifest = read_manifest(Path(run_dir))
    try:
        name, path, sha256 = (manifest["model"][key] for key in ("name", "path", "sha256"))  # type: ignore[index]
    except (KeyError, TypeError):
        raise SpecbenchError(f"{run_dir} has no manifest.json naming the model; cannot find its tokenizer") from None
    path = Path(path)
    if not path.exists():
        raise SpecbenchError(f"the run's model {path} is gone; give speed.py that model's tokenizer folder yourself")
    if path.is_dir():
        return path
    if file_sha256(path) != sha256:
        raise SpecbenchError(f"the run's model {path} changed since the run (sha256 differs)")
    return converted_copy(ModelSource(name, path, sha256))
