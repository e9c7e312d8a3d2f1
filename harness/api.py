"""The Python API: ``specbench.run(...)`` and ``specbench.load(run_dir)`` for notebooks and scripts.

``run`` takes the options of ``specbench run`` as keywords (the fields of `RunConfig`), or a `RunConfig`,
and runs the same `Run` the CLI runs, so a notebook and the command line give the same files. It also
takes an in-memory model: a `TargetModel`, or a Hugging Face causal LM with its tokenizer. Trained
drafters accept an in-memory model when its weights fingerprint matches their checkpoint's recipe
(`specbench.checkpoint.trained_for`). Both return a `RunResult`: ``.summary`` (a pandas DataFrame, the
rows of ``summary.csv``), ``.answers`` (typed records by drafter) and ``.report(out)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from specbench.errors import SpecbenchError
from specbench.harness.config import RunConfig
from specbench.harness.options import declared
from specbench.results import ANSWERS, Answer, batch_folders, load_run, read_manifest


@dataclass
class RunResult:
    """A finished (or resumed) run directory, read back from its files."""

    path: Path
    answers: dict[str, list[Answer]] = field(repr=False)
    manifest: dict | None = field(repr=False)
    #: a batch sweep's sub-runs (`--batch-size`): records by batch size B > 1, then by drafter; ``answers`` is
    #: batch 1's (or, for a run without batch 1, the smallest size's)
    batches: dict[int, dict[str, list[Answer]]] = field(default_factory=dict, repr=False)

    @cached_property
    def summary(self) -> pd.DataFrame:
        """One row per drafter and category plus ``overall`` (the columns of ``summary.csv``); a batch sweep
        has one block of rows per batch size."""
        from specbench.reports.summary import summarize, summarize_run

        return summarize_run(self.path) if self.batches else summarize(self.answers)

    def report(self, out: str | Path | None = None, formats: tuple[str, ...] = ("md", "html", "tex", "csv"),
               charts: tuple[str, ...] = ("png", "pdf"), dpi: int = 200) -> Path:
        """Write the report (tables and charts, as ``specbench report``) to ``out`` (default RUN/report)."""
        from specbench.reports.report import build_report, write_report
        from specbench.reports.runs import load_runs

        out = Path(out) if out is not None else self.path / "report"
        write_report(build_report(load_runs([self.path])), out, list(formats), list(charts), dpi)
        return out


def load(run_dir: str | Path) -> RunResult:
    """A finished run directory (answers, manifest) as a `RunResult`."""
    run_dir = Path(run_dir)
    batches = {size: load_run(folder) for size, folder in batch_folders(run_dir)}
    if (run_dir / ANSWERS).is_dir() or not batches:
        answers = load_run(run_dir)  # no answers/ and no sub-run: its one-line error
    else:
        answers = batches[min(batches)]
    return RunResult(run_dir, answers, read_manifest(run_dir), batches)


def _target_from(model: Any, tokenizer: Any) -> Any:
    """The `TargetModel` for an in-memory ``model``; None for none, a path or a name (the run loads it from
    ``config.model``)."""
    from specbench.model import TargetModel

    if model is None or isinstance(model, (str, Path)):
        return None
    if isinstance(model, TargetModel):
        return model
    if tokenizer is None:
        raise SpecbenchError("an in-memory model needs its tokenizer: specbench.run(model=..., tokenizer=...)")
    if not hasattr(model, "get_output_embeddings") or not hasattr(model, "base_model"):
        raise SpecbenchError(f"model must be a path, 'default', a TargetModel or a Hugging Face causal LM, "
                             f"got {type(model).__name__}")
    return TargetModel(model, tokenizer)


def run(config=None, /, *, model: Any = None, tokenizer: Any = None, progress: bool = False,
        **options: Any) -> RunResult:
    """Run drafters through the shared harness and return the result (files are written to ``out``).

    ``options`` are `RunConfig`'s options (`harness.config`, where each is declared with its help, default
    and check), as on the command line; text is parsed as the command line parses it: ``drafters`` (a list or a
    comma-separated string, ``"all"`` for every registered one), ``bench``, ``limit``, ``max_new_tokens``,
    ``tree_budget`` (``"auto"``, the default; an int; or ``"hydra=4,medusa=3"``), ``temperature`` (0: greedy),
    ``top_p``, ``top_k``, ``verify`` (``"rejection"``, lossless; ``"typical"``, lossy), ``seed``, ``breakdown``,
    ``drafter_options`` ({"ngram": {"max_depth": 6}}), ``out``
    (default ``runs/<date-time>``), ``resume``, ``preset`` (``"spec-bench"``), ``config_file`` (a TOML/JSON
    file of these options, or a run's manifest.json: the options given here override it) ... ``model`` is
    ``"default"``, a path, a Hugging Face Hub id, a `TargetModel` or a Hugging Face causal LM (then give
    ``tokenizer``; device and dtype are the model's own).
    """
    from specbench.harness.runner import Run
    from specbench.reports.summary import write_summary

    if config is not None and options:
        raise SpecbenchError("give either a RunConfig or keyword options, not both")
    if config is None:
        unknown = sorted(set(options) - set(declared(RunConfig)))
        if unknown:
            raise SpecbenchError(f"unknown run option(s) {', '.join(unknown)}; known: {', '.join(declared(RunConfig))}")
        config = RunConfig.from_layers(options)
    if isinstance(model, (str, Path)):
        config.model = str(model)
    target = _target_from(model, tokenizer)
    if target is not None:
        config.model = target.name
        config.device = str(target.device)
        config.dtype = str(target.dtype).removeprefix("torch.")
    out = Run(config, progress=progress, target=target).execute()
    write_summary(out)
    return load(out)
