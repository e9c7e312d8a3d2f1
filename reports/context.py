"""Run context for every report: what was measured, on what, with which versions, when, by which command,
read from the run's ``manifest.json`` (fields written by `harness.runner.build_manifest`)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd

from specbench.reports.runs import RunResults
from specbench.reports.tables import model_label

FIELDS = ("Run directory", "Model", "Parameters", "Model sha256", "dtype", "Device", "Regime", "Threads", "Versions",
          "git", "Drafters", "Sampling", "Tree budget", "Max new tokens", "Repeats", "Timing", "Questions", "Date",
          "Command line")


def _short(value: object, n: int = 12) -> str:
    return str(value)[:n] if value else "?"


def _command(argv: list[str] | str | None) -> str:
    if not argv:
        return "?"
    if isinstance(argv, str):
        return argv
    return shlex.join([Path(argv[0]).name, *argv[1:]])


def _parameters(count: object) -> str:
    if not isinstance(count, (int, float)):
        return "?"
    return f"{count / 1e9:.2f} B" if count >= 1e9 else f"{count / 1e6:.1f} M"


def _budgets(config: dict, budgets: dict | None) -> str:
    """The ``--tree-budget`` given and, when the manifest records them, what each drafter ran at."""
    spec = str(config.get("tree_budget", "?"))
    if not budgets:
        return spec
    ran = ", ".join(f"{name} {choice['budget']}" + (" (auto)" if choice.get("how") == "auto" else "")
                    for name, choice in budgets.items() if choice.get("how") != "baseline")
    return f"{spec}: {ran}" if ran else spec


def regime_label(manifest: dict) -> str:
    """``eager``, or ``compiled`` with its mode and, per drafter, what ran compiled (`harness.runner.drafters_regime`)."""
    regime = manifest.get("regime") or {"name": (manifest.get("config") or {}).get("regime", "eager")}
    if regime.get("name") != "compiled":
        return str(regime.get("name", "eager"))
    backend = f"{regime['backend']}, " if regime.get("backend", "inductor") != "inductor" else ""
    text = f"compiled ({backend}{regime.get('mode', '?')}; static cache, buckets {regime.get('buckets', '?')})"
    drafters = regime.get("drafters") or {}
    parts = [f"{name}: {', '.join(rec['compiled']) if rec.get('compiled') else 'eager'}" for name, rec in drafters.items()
             if name != "vanilla"]
    return f"{text}; drafters {'; '.join(parts)}" if parts else text


def run_context(run: RunResults) -> dict[str, str]:
    """Field -> text, in `FIELDS` order; '?' where the manifest does not say."""
    manifest = run.manifest
    if manifest is None:
        return {name: ("no manifest.json" if name != "Run directory" else str(run.path)) for name in FIELDS}
    config, env = manifest.get("config") or {}, manifest.get("environment") or {}
    model, data = manifest.get("model") or {}, manifest.get("data") or {}
    device = config.get("device", "?")
    hardware = env.get("cuda_device") if str(device).startswith("cuda") else env.get("processor")
    if not hardware and env.get("cpu_count"):
        hardware = f"{env['cpu_count']} CPUs"
    versions = ", ".join(f"{name} {env.get(key) or manifest.get(key)}" for name, key in
                         (("specbench", "specbench_version"), ("torch", "torch"), ("transformers", "transformers"),
                          ("python", "python")) if env.get(key) or manifest.get(key))
    questions = data.get("questions") or []
    timing = "per-stage breakdown (--breakdown)" if config.get("breakdown") else "wall time per turn (headline)"
    return {
        "Run directory": str(run.path),
        "Model": f"{model_label(model, str(config.get('dtype', '?')))}, {model.get('architecture', '?')}",
        "Parameters": _parameters(model.get("parameters")),
        "Model sha256": _short(model.get("sha256")),
        "dtype": str(config.get("dtype", "?")),
        "Device": f"{device} ({hardware})" if hardware else str(device),
        "Regime": regime_label(manifest),
        "Threads": str(env.get("torch_threads") or config.get("threads") or "?"),
        "Versions": versions or "?",
        "git": _short(manifest.get("git_sha")) + (" (uncommitted changes)" if manifest.get("git_dirty") else ""),
        "Source sha256": _short(manifest.get("source_sha256")),
        "Drafters": ", ".join(config.get("drafters") or []) or "?",
        "Sampling": run.sampling_label + ("" if run.sampling.greedy else f", seed {config.get('seed', '?')}"),
        "Tree budget": _budgets(config, manifest.get("budgets")),
        "Max new tokens": str(config.get("max_new_tokens", "?")),
        "Repeats": str(config.get("repeats", "?")),
        "Timing": timing,
        "Questions": f"{len(questions)} from {Path(str(data.get('path', '?'))).name} "
                     f"(sha256 {_short(data.get('sha256'))})",
        "Date": str(manifest.get("started", "?")),
        "Command line": _command(manifest.get("command")),
    }


def context_table(runs: list[RunResults]) -> pd.DataFrame:
    """Fields as rows, one column per run (labelled)."""
    columns = {run.label: run_context(run) for run in runs}
    frame = pd.DataFrame(columns, index=list(FIELDS))
    frame.index.name = "Field"
    return frame.reset_index()
