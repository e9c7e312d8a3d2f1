"""``--tree-budget auto``: each drafter's budget of highest predicted speedup on this machine.

For each drafter whose budget is ``auto`` (greedy verification only: replay holds for greedy decoding):

1. the calibration set's greedy trajectories (`calibration`, cached);
2. the drafter replayed over them at every candidate budget: tau(b) and its own draft ms per step
   (cached per drafter identity, candidates and machine);
3. the loop, measured on one calibration prompt with plain decoding: verify ms of a one-node step (v1)
   and the rest of a step (overhead o: accept, KV commit, bookkeeping); measured once per machine and
   cached, so that the choice does not flip between runs on noise;
4. predicted speedup(b) = tau(b) (v1 + o) / (v1 r(b) + d(b) + o), where r(b) = t(b) / t(1) from the
   verify-cost profile (its shape; the scale comes from the measured loop, so a profile measured at
   another moment, or on another machine of the same kind, still applies), and the budget that
   maximises it.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from specbench.drafters.vanilla import VanillaDrafter
from specbench.errors import SpecbenchError
from specbench.harness.autobudget.calibration import (
    CALIBRATION_TOKENS,
    calibration_file,
    calibration_source,
    calibration_trajectories,
)
from specbench.harness.autobudget.predict import BudgetPoint, best_budget
from specbench.harness.autobudget.profile import measure_and_cache, resolve_profile
from specbench.harness.autobudget.replay import budget_point, sweep
from specbench.harness.autobudget.spec import AUTO, DEFAULT_CANDIDATES, BudgetChoice, parse_budget_spec, split_entry
from specbench.harness.autobudget.trajectories import cached_json, key_digest
from specbench.harness.loop import generate
from specbench.model import cache_root
from specbench.progress import enabled
from specbench.questions import load_questions
from specbench.results import BASELINE

CURVE_FORMAT = 3  # bump when what a cached curve holds changes
TIMING_TOKENS = 48  # plain-decoding tokens timed for the loop's v1 and overhead (after an untimed pass)


@dataclass
class LoopTiming:
    """This process's plain-decoding step: verify ms of one node (v1), the rest of a step (overhead)."""

    verify1_ms: float
    overhead_ms: float
    steps: int


def measure_loop_timing(target, prompt_ids: list[int], tokens: int = TIMING_TOKENS) -> LoopTiming:
    """Time plain decoding of ``prompt_ids`` through the loop (after one untimed pass)."""
    generate(target, VanillaDrafter(), prompt_ids, tokens, 1)
    result = generate(target, VanillaDrafter(), prompt_ids, tokens, 1, breakdown=True)
    if not result.steps:
        raise SpecbenchError("calibration: the timing prompt ended at once; cannot time the loop")
    verify = statistics.median(step.stage_ms["verify"] for step in result.steps)
    staged = statistics.fmean(step.stage_ms.get("verify", 0.0) + step.draft_ms for step in result.steps)
    step_ms = (result.wall_s * 1000 - (result.prefill_ms or 0.0)) / len(result.steps)
    return LoopTiming(verify1_ms=verify, overhead_ms=max(step_ms - staged, 0.0), steps=len(result.steps))


def cached_loop_timing(target, prompt_ids: list[int], trajectory_key: dict, machine: dict, root: Path) -> LoopTiming:
    """`measure_loop_timing`, measured once per model, calibration set and machine, then read from the
    cache: with the cached curves and profile it makes `auto`'s choice the same from run to run (the
    predictions of neighbouring budgets often differ by less than this timing's noise)."""
    key = {"format": CURVE_FORMAT, "trajectories": trajectory_key, "machine": machine, "tokens": TIMING_TOKENS}
    path = root / "calibration" / f"loop-{key_digest(key)}.json"
    return LoopTiming(**cached_json(path, key, lambda: asdict(measure_loop_timing(target, prompt_ids))))


def drafter_identity(name: str, drafter, options: dict) -> dict:
    """What a drafter's proposals depend on: its class, options and (for trained ones) weights."""
    kind = type(drafter)
    return {"name": name, "class": f"{kind.__module__}.{kind.__qualname__}", "options": options,
            "identity": drafter.identity()}


def replayed_curve(target, name: str, drafter, options: dict, trajectories, trajectory_key: dict,
                   candidates: list[int], max_new_tokens: int, machine: dict, root: Path) -> list[BudgetPoint]:
    """tau and draft ms per candidate budget, replayed over the calibration trajectories (cached)."""
    drafter.reset(target.handle)  # a trained drafter loads its checkpoint here, so its identity is known
    key = {"format": CURVE_FORMAT, "trajectories": trajectory_key, "drafter": drafter_identity(name, drafter, options),
           "candidates": candidates, "machine": machine}

    def replayed() -> list[dict]:
        table = sweep(target, {name: drafter}, [("calibration", t) for t in trajectories], candidates, max_new_tokens,
                      label=f"replay {name}")
        return [asdict(budget_point(row)) for row in table[table["category"] == "overall"].itertuples()]

    path = root / "calibration" / "curves" / f"{name}-{key_digest(key)}.json"
    return [BudgetPoint(**point) for point in cached_json(path, key, replayed)]


def choose_budgets(wanted: dict[str, int | str], calibrate) -> dict[str, BudgetChoice]:
    """Each drafter's `BudgetChoice`; ``calibrate(name)`` returns (points, profile, timing) for a drafter
    whose budget is ``auto`` (called only for those)."""
    choices = {}
    for name, budget in wanted.items():
        if split_entry(name)[0] == BASELINE:
            choices[name] = BudgetChoice(1, "baseline")
        elif budget != AUTO:
            choices[name] = BudgetChoice(int(budget), "fixed")
        else:
            points, profile, timing = calibrate(name)
            best, predictions = best_budget(points, profile, timing.overhead_ms, timing.verify1_ms)
            curve = [asdict(p) | {"predicted_speedup": predictions[p.budget]} for p in points]
            choices[name] = BudgetChoice(best, AUTO, predictions[best], curve)
    return choices


def resolve_budgets(config, target, prompts, drafters: dict,
                    progress: bool = False) -> tuple[dict[str, BudgetChoice], dict | None]:
    """(each drafter's `BudgetChoice`, what calibration used, or None when no budget is ``auto``) for a
    `RunConfig`. A missing profile is measured here (and cached), as `specbench profile` would. With
    ``progress``, the profile, the greedy pass and each drafter's replays show bars (`specbench.progress`)."""
    with enabled(progress):
        return _resolve_budgets(config, target, prompts, drafters, progress)


def _resolve_budgets(config, target, prompts, drafters: dict, progress: bool) -> tuple[dict[str, BudgetChoice], dict | None]:
    wanted = parse_budget_spec(config.tree_budget, list(drafters))
    if AUTO not in wanted.values():
        return choose_budgets(wanted, None), None
    profile, source = resolve_profile(config.profile, target)
    if profile is None:
        print("specbench: no verify-cost profile for this machine yet; measuring one (`specbench profile`)",
              file=sys.stderr)
        profile, path = measure_and_cache(target, cache_root())
        source = str(path)
    calibrated_on = calibration_source(config.calibration, config.bench, config.categories, config.limit)
    calibration = calibration_file(calibrated_on, config.bench, config.categories, config.limit, cache_root())
    tokens = min(config.max_new_tokens, CALIBRATION_TOKENS)
    trajectories, trajectory_key = calibration_trajectories(target, prompts, calibration, tokens, config.template,
                                                            cache_root())
    machine = {name: profile.key.get(name) for name in ("device", "device_name", "dtype", "threads", "torch")}
    timing = cached_loop_timing(target, trajectories[0].prompt.tolist(), trajectory_key, machine, cache_root())
    candidates = [b for b in (config.auto_budgets or DEFAULT_CANDIDATES) if b <= max(profile.sizes)] or [1]

    def calibrate(name: str):
        if progress:
            print(f"specbench: choosing {name}'s tree budget (replay over {len(trajectories)} calibration turns)",
                  file=sys.stderr)
        limit = drafters[name].max_budget()  # larger budgets would replay the same trees
        mine = candidates if limit is None else sorted({b for b in candidates if b < limit} | {min(limit, max(candidates))})
        points = replayed_curve(target, name, drafters[name], config.drafter_options.get(split_entry(name)[0], {}), trajectories,
                                trajectory_key, mine, tokens, machine, cache_root())
        return points, profile, timing

    choices = choose_budgets(wanted, calibrate)
    record = {"file": str(calibration), "source": calibrated_on,
              "questions": len(load_questions(calibration)), "turns": len(trajectories), "max_new_tokens": tokens,
              "candidates": candidates, "profile_source": source, "loop": asdict(timing)}
    return choices, record
