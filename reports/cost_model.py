"""`auto`'s cost model against the run: per drafter and batch size, each term of the predicted step beside what
the answers' stage times measured, so a missed prediction says which term missed.

`auto` predicts a step's speedup S(b) = τ(b) (v1 + o) / (V(b) + d(b) + o') (`harness.autobudget.predict`): V(b) the
verify of the drafter's trees (v1 times the profile's ratio), d(b) its draft cost (replayed, times the draft
ratio), o the plain loop's per-step work, o' the drafter's own (at batch 1 measured in its real decode, where the
manifest has it; else o), v1 the one-node verify, all at the batch size. The manifest records the chosen point's
τ, d, step prediction (or, in runs before the prefill term, the prediction itself) and the calibration's v1, o
and o' (at batch 1 each drafter's own, timed beside its draft ratio, where the manifest has it), so V is backed
out exactly: V = τ (v1 + o) / S − d − o'. The
run's per-step means come from the answers' step records (verify; draft plus transform; accept as the loop's
part). Vanilla's row puts v1 beside its measured one-node verify: their ratio is the sitting's pace against the
calibration's, which cancels in a speedup; a drafter's verify or draft that misses by more than vanilla's does
not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.reports.runs import RunResults
from specbench.reports.tables import Table, at_batch, fmt
from specbench.results import BASELINE, Answer, batch_folders, load_run


def step_means(records: list[Answer]) -> dict[str, float]:
    """Mean ms per step of verify, draft (with transform) and accept, and mean tokens per step, over every
    step of every turn (at B > 1 a row's step carries its batch step's shared verify and draft)."""
    steps = [step for record in records for turn in record.steps for step in turn if step.stage_ms]
    if not steps:
        return {}
    stage = lambda name: float(np.mean([step.stage_ms.get(name, 0.0) for step in steps]))  # noqa: E731
    return {"verify": stage("verify"), "draft": stage("draft") + stage("transform"), "accept": stage("accept"),
            "tau": float(np.mean([step.accepted for step in steps]))}


def drafter_loop(calibration: dict, name: str, size: int, loop: dict) -> tuple[float, float, float]:
    """(v1, o, o') that `auto` weighed ``name``'s draft cost against at batch ``size``: at batch 1 the loop timed
    beside its draft ratio (`choose.measure_run_draft`) where the manifest records one, else the calibration's
    ``loop`` (runs from before that timing, and every batch size > 1); o' the drafter's own overhead in that
    real decode where recorded, else o."""
    ratio = ((calibration.get("draft_ratio") or {}).get(name) or {}) if size == 1 else {}
    timing = ratio.get("loop") or loop
    own = ratio.get("run_overhead_ms")
    return timing["verify1_ms"], timing["overhead_ms"], timing["overhead_ms"] if own is None else own


def cost_model_table(run: RunResults) -> Table | None:
    """Predicted against measured step terms for every drafter `auto` chose a budget for, at every batch size
    of the run; None without `auto` budgets or stage times."""
    manifest = run.manifest or {}
    budgets, calibration = manifest.get("budgets") or {}, manifest.get("calibration") or {}
    if not budgets or not calibration:
        return None
    sizes = ([(1, run.answers)] if run.answers else []) + [(size, load_run(folder))
                                                            for size, folder in batch_folders(run.path)]
    rows = []
    for size, answers in sizes:
        loop = (at_batch(calibration, size) or {}).get("loop")
        if not loop:
            continue
        for name, records in answers.items():
            measured = step_means(records)
            if not measured:
                continue
            if name == BASELINE:
                v1, o = loop["verify1_ms"], loop["overhead_ms"]
                rows.append({"drafter": name, "batch": size, "budget": 1, "verify1_pred": v1, "verify_pred": v1,
                             "draft_pred": 0.0, "loop_pred": o, "tau_calibration": 1.0, "predicted_speedup": np.nan,
                             **measured})
                continue
            choice = at_batch(budgets.get(name), size)
            point = next((p for p in (choice or {}).get("curve") or [] if p["budget"] == choice["budget"]), None)
            if choice is None or choice.get("how") != "auto" or point is None:
                continue
            predicted = point["predicted_speedup"]
            step = point.get("step_speedup", predicted)
            v1, o, own = drafter_loop(calibration, name, size, loop)
            rows.append({"drafter": name, "batch": size, "budget": choice["budget"], "verify1_pred": v1,
                         "verify_pred": point["tau"] * (v1 + o) / step - point["draft_ms"] - own,
                         "draft_pred": point["draft_ms"], "loop_pred": own, "tau_calibration": point["tau"],
                         "predicted_speedup": predicted, **measured})
    if not any(row["drafter"] != BASELINE for row in rows):
        return None
    data = pd.DataFrame(rows).rename(columns={"verify": "verify_run", "draft": "draft_run", "accept": "loop_run",
                                              "tau": "tau_run"})
    data["step_pred"] = data["verify_pred"] + data["draft_pred"] + data["loop_pred"]
    data["step_run"] = data["verify_run"] + data["draft_run"] + data["loop_run"]
    pair = lambda a, b, digits=1: [f"{fmt(x, digits)} / {fmt(y, digits)}" for x, y in zip(data[a], data[b])]  # noqa: E731
    display = pd.DataFrame({
        "Drafter": data["drafter"], "Batch": data["batch"].astype(str), "Budget": data["budget"].astype(str),
        "v1 ms": [fmt(v) for v in data["verify1_pred"]],
        "Verify ms": pair("verify_pred", "verify_run"), "Draft ms": pair("draft_pred", "draft_run"),
        "Loop ms": pair("loop_pred", "loop_run", 2), "Step ms": pair("step_pred", "step_run"),
        "τ": pair("tau_calibration", "tau_run", 2),
        "Verify run / predicted": [fmt(r / p) for r, p in zip(data["verify_run"], data["verify_pred"])],
    })
    note = ("Each cell: predicted / measured, per decoding step (at batch B a step verifies every row's tree in one "
            "forward). Predicted: `auto`'s terms at the chosen budget (verify backed out of the recorded prediction; "
            "draft: the replayed propose cost, at batch 1 times the run/replay draft ratio; loop: the drafter's own "
            "per-step overhead in its real decode where recorded, else the calibration's plain one); v1: the one-node "
            "verify the prediction is scaled by, at batch 1 the drafter's own, "
            "timed beside its draft ratio where the run records one. Measured: the answers' stage means (loop: accept "
            "and KV commit). Vanilla's verify ratio is the sitting's pace against the calibration's and cancels in a "
            "speedup; a drafter whose ratio differs from vanilla's at the same batch size was timed at another pace "
            "(its v1 differs from vanilla's) or mispredicted by the profile.")
    return Table("cost_model", "auto's cost model against the run", data, display, note)
