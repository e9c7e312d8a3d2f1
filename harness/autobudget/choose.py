"""``--tree-budget auto``: each drafter's budget of highest predicted speedup on this machine.

For each drafter whose budget is ``auto`` (greedy verification only: replay holds for greedy decoding):

1. the calibration set's greedy trajectories (`calibration`, cached);
2. the drafter replayed over them at every candidate budget: tau(b) and its own draft ms per step
   (cached per drafter identity, candidates and machine);
3. the loop, measured on one calibration prompt with plain decoding: verify ms of a one-node step (v1)
   and the rest of a step (overhead o: accept, KV commit, bookkeeping); measured once per machine and
   cached, so that the choice does not flip between runs on noise (at batch 1 it only picks the budget step 5
   measures at; step 6 replaces it);
4. predicted speedup(b) = tau(b) (v1 + o) / (v1 r(b) + c d(b) + o) (o' for the last o at step 7), where
   r(b) = t(b) / t(1) from the verify-cost profile (its shape; the scale comes from the measured loop, so a profile measured at
   another moment, or on another machine of the same kind, still applies), and the budget that
   maximises it;
5. c, the drafter's *run/replay draft ratio*: its propose ms per step in a real run, on the first calibration
   turn at the budget step 4 picks with c = 1, over the replayed curve's at that budget (then the choice is
   made again with c). Replay proposes back to back, its weights warm in the CPU's caches; in a run the
   target's forward, streaming hundreds of MB of weights, evicts them between proposes. The README's main job
   measured c = 1.4-1.75 for the trained drafters (docs/performance.md, "`auto`'s draft cost"); without it
   `auto` over-promised. The denominator is the curve's own point, not a second replay: the curve then gives
   the shape of the draft cost over budgets and the run its scale (a second replay, at another moment, once
   put sps's c at 0.72 and its prediction 17% high);
6. the final choice weighs that run's draft ms against a v1 and overhead timed *in the same window*: plain
   decoding just before and just after the drafter's real decode (`measure_run_draft`). A CPU's pace drifts
   by a quarter over minutes; step 3's v1, timed at another moment, once came out 1.41x the run's own and made
   every drafter's drafting look that much cheaper (docs/decisions.md, "At batch 1, a drafter's draft ms and
   the v1 it is weighed against are timed in one window");
7. at batch 1 the prediction is of what a run measures, a turn's wall time: the drafter's side of a step carries
   its own overhead o' from that real decode (a tree's acceptance walk and KV commit: 1.1-1.8 ms per step on
   the README's main job against a one-node step's 0.4-0.7), and the prefill, the same for every drafter,
   enters as p = the calibration turns' prefill over their plain decode time (`measure_prefill_share`):
   speedup = (1 + p) / (p + 1 / step speedup). Neither moves the budget much (p not at all: the wall-time
   speedup is monotone in the step's); both lower the prediction by what a run would otherwise miss it by
   (docs/decisions.md, "The drafter's own overhead and the prefill in `auto`'s prediction").

At each batch size B > 1 of the run (``--batch-size``) the same prediction is made with B's own terms, and
the budget chosen there is recorded in `BudgetChoice.batches`: the prediction is a *throughput* speedup over
vanilla at B. Every row of a batch accepts what it would alone (exactness), so tau(b) is batch 1's; v1, o
and r(b) come from B rows (the loop timed with B plain-decoding rows, the profile at B, `profile.batch_profile`);
d(b) is the drafter's propose cost for B rows (`replay.RowsTogether`: B identical rows through
`Drafter.propose_rows`, replayed over the first `BATCH_DRAFT_TURNS` calibration turns), times batch 1's c.
Rows that end early and refill are not modelled.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.drafters.vanilla import VanillaDrafter
from specbench.errors import SpecbenchError
from specbench.harness.autobudget.calibration import (
    CALIBRATION_TOKENS,
    calibration_file,
    calibration_source,
    calibration_trajectories,
)
from specbench.harness.autobudget.predict import (
    BudgetPoint,
    best_budget,
    best_of,
    predicted_relative_se,
    step_speedup,
)
from specbench.harness.autobudget.profile import batch_profile, batch_width, measure_and_cache, resolve_profile
from specbench.harness.autobudget.replay import RowsTogether, budget_point, sweep
from specbench.harness.autobudget.spec import AUTO, DEFAULT_CANDIDATES, BudgetChoice, parse_budget_spec, split_entry
from specbench.harness.autobudget.trajectories import cached_json, holding, key_digest
from specbench.harness.loop import Job, generate, generate_batch
from specbench.metrics import ratio_standard_error, wall_speedup
from specbench.model_source import cache_root
from specbench.progress import enabled
from specbench.questions import load_questions
from specbench.results import BASELINE

if TYPE_CHECKING:  # pandas loads with the replay that makes the table
    import pandas as pd

CURVE_FORMAT = 3  # bump when what a cached curve holds changes
TIMING_TOKENS = 48  # plain-decoding tokens timed for the loop's v1 and overhead (after an untimed pass)
TIMING_PASSES = 3  # timed passes of them; the one with the fastest verify is kept (a busy moment only adds time)
PREFILL_FORMAT = 1  # bump when what a cached prefill share measures changes
BATCH_DRAFT_TURNS = 4  # calibration turns replayed with B rows for a drafter's propose cost at batch size B


@dataclass
class LoopTiming:
    """This process's plain-decoding step: verify ms of one node (v1), the rest of a step (overhead)."""

    verify1_ms: float
    overhead_ms: float
    steps: int


def measure_loop_timing(target, prompt_ids: list[int], tokens: int = TIMING_TOKENS, batch: int = 1) -> LoopTiming:
    """Time plain decoding of ``prompt_ids`` through the loop: one untimed pass, then ``TIMING_PASSES`` timed ones,
    keeping the pass whose median one-node verify is fastest. v1 is the scale replayed draft milliseconds are
    weighed against, so one slow window (a main job's v1 once came out 1.41x the run's own) would make every
    drafter's drafting look that much cheaper. At ``batch`` > 1, ``batch`` rows of it decode together (the last
    row's record: its clock starts after the other rows' prefills, and every row's verify stage spans the one
    forward)."""
    return min(loop_timing_passes(target, prompt_ids, tokens, batch), key=lambda timing: timing.verify1_ms)


def loop_timing_passes(target, prompt_ids: list[int], tokens: int = TIMING_TOKENS, batch: int = 1) -> list[LoopTiming]:
    """One untimed pass of plain decoding, then the ``TIMING_PASSES`` timed ones, each pass's timing."""
    passes = [timed_pass(target, prompt_ids, tokens, batch, record=n > 0) for n in range(TIMING_PASSES + 1)]
    return passes[1:]


def timed_pass(target, prompt_ids: list[int], tokens: int, batch: int, record: bool = True) -> LoopTiming | None:
    """One plain decoding of ``prompt_ids`` (``batch`` rows of it together); its v1 and overhead if ``record``."""
    if batch == 1:
        result = generate(target, VanillaDrafter(), prompt_ids, tokens, 1, breakdown=record)
    else:
        jobs = [Job(list(prompt_ids), tokens, key=row) for row in range(batch)]
        result = {job.key: result for job, result in generate_batch(target, VanillaDrafter(), jobs, 1, batch,
                                                                     breakdown=record)}[batch - 1]
    if not record:
        return None
    if not result.steps:
        raise SpecbenchError("calibration: the timing prompt ended at once; cannot time the loop")
    verify = statistics.median(step.stage_ms["verify"] for step in result.steps)
    return LoopTiming(verify1_ms=verify, overhead_ms=step_overhead_ms(result), steps=len(result.steps))


def step_overhead_ms(result) -> float:
    """A decoded turn's (`TurnResult` with stage times) mean ms per step outside its verify and draft stages:
    acceptance, KV commit and the loop's bookkeeping."""
    staged = statistics.fmean(step.stage_ms.get("verify", 0.0) + step.draft_ms for step in result.steps)
    step_ms = (result.wall_s * 1000 - (result.prefill_ms or 0.0)) / len(result.steps)
    return max(step_ms - staged, 0.0)


def measure_prefill_share(target, trajectories) -> dict:
    """The calibration turns' prefill cost over plain decoding's decode time of them, p = mean prefill ms /
    ((mean new tokens - 1) (v1 + o)): every turn's prompt prefilled through the loop (after one untimed prefill),
    then one plain-decoding pass for v1 and o in the same window, so p is a ratio of one moment's costs.
    {prefill_ms, new_tokens, verify1_ms, overhead_ms, share}."""
    first = trajectories[0].prompt.tolist()
    generate(target, VanillaDrafter(), first, 1, 1)
    prefill_ms = statistics.fmean(generate(target, VanillaDrafter(), t.prompt.tolist(), 1, 1, breakdown=True).prefill_ms
                                  for t in trajectories)
    loop = timed_pass(target, first, TIMING_TOKENS, 1)
    tokens = statistics.fmean(len(t.continuation) for t in trajectories)
    steps = max(tokens - 1, 1.0)  # the first new token comes from the prefill's logits
    return {"prefill_ms": prefill_ms, "new_tokens": tokens, "verify1_ms": loop.verify1_ms,
            "overhead_ms": loop.overhead_ms, "share": prefill_ms / (steps * (loop.verify1_ms + loop.overhead_ms))}


def cached_prefill_share(target, trajectories, trajectory_key: dict, machine: dict, root: Path) -> dict:
    """`measure_prefill_share`, once per model, calibration set and machine (cached like the loop timing)."""
    key = {"format": CURVE_FORMAT, "prefill_format": PREFILL_FORMAT, "trajectories": trajectory_key,
           "machine": machine, "loop_tokens": TIMING_TOKENS}
    path = root / "calibration" / f"prefill-{key_digest(key)}.json"
    return cached_json(path, key, lambda: measure_prefill_share(target, trajectories), holding("share"))


def cached_loop_timing(target, prompt_ids: list[int], trajectory_key: dict, machine: dict, root: Path,
                       batch: int = 1) -> LoopTiming:
    """`measure_loop_timing`, measured once per model, calibration set, machine and batch size, then read
    from the cache: with the cached curves and profile it makes `auto`'s choice the same from run to run (the
    predictions of neighbouring budgets often differ by less than this timing's noise)."""
    key = {"format": CURVE_FORMAT, "trajectories": trajectory_key, "machine": machine, "tokens": TIMING_TOKENS,
           "passes": TIMING_PASSES}
    key |= {"batch": batch} | batch_width(target, batch) if batch > 1 else {}
    path = root / "calibration" / f"loop-{key_digest(key)}.json"
    return cached_json(path, key, lambda: asdict(measure_loop_timing(target, prompt_ids, batch=batch)),
                       lambda value: LoopTiming(**value))


def drafter_identity(name: str, drafter, options: dict) -> dict:
    """What a drafter's proposals depend on: its class, options and (for trained ones) weights."""
    kind = type(drafter)
    return {"name": name, "class": f"{kind.__module__}.{kind.__qualname__}", "options": options,
            "identity": drafter.identity()}


def replayed_curve(target, name: str, drafter, options: dict, trajectories, trajectory_key: dict,
                   candidates: list[int], max_new_tokens: int, machine: dict, root: Path,
                   questions: list[int]) -> list[BudgetPoint]:
    """tau, draft ms and trees per candidate budget, replayed over the calibration trajectories, with each
    question's own (cached). ``questions``: each trajectory's question index (`calibration_trajectories`)."""
    drafter.reset(target.handle)  # a trained drafter loads its checkpoint here, so its identity is known
    key = {"format": CURVE_FORMAT, "trajectories": trajectory_key, "drafter": drafter_identity(name, drafter, options),
           "candidates": candidates, "machine": machine, "questions": questions}

    def replayed() -> list[dict]:
        turns = [(f"question {index:04d}", t) for index, t in zip(questions, trajectories)]
        table = sweep(target, {name: drafter}, turns, candidates, max_new_tokens, label=f"replay {name}")
        return [asdict(point) for point in points_with_noise(table)]

    path = root / "calibration" / "curves" / f"{name}-{key_digest(key)}.json"
    return cached_json(path, key, replayed, lambda value: [BudgetPoint(**point) for point in value])


def points_with_noise(table: "pd.DataFrame") -> list[BudgetPoint]:
    """One drafter's `sweep` table whose categories are the calibration questions as `BudgetPoint`s, one per
    budget (its ``overall`` row), each with its per-question records (``by_question``) and tau's standard error
    over the questions (`metrics.ratio_standard_error`)."""
    points = []
    for row in table[table["category"] == "overall"].itertuples():
        questions = table[(table["budget"] == row.budget) & (table["category"] != "overall")]
        se = ratio_standard_error(questions["tokens"], questions["steps"])
        by_question = [{"tokens": int(q.tokens), "steps": int(q.steps), "draft_ms": float(q.draft_ms),
                        "trees": budget_point(q).trees} for q in questions.itertuples()]
        points.append(replace(budget_point(row), tau_se=None if math.isnan(se) else se, by_question=by_question))
    return points


def measure_run_draft(target, drafter, trajectory, budget: int, tokens: int) -> dict:
    """The drafter's propose ms per step decoding ``trajectory``'s prompt for real at ``budget`` (after one
    untimed pass), its own ms per step outside verify and draft (``run_overhead_ms``: its trees' acceptance and
    KV commit, which a one-node step's overhead underprices), and the loop timed in the same window:
    {budget, steps, run_ms, run_overhead_ms, loop}. ``loop`` is a
    `LoopTiming` of plain decoding, the mean of one timed pass just before the real decode and one just after,
    so that the draft ms and the v1 it is weighed against share the machine's pace of that moment."""
    prompt = trajectory.prompt.tolist()
    generate(target, drafter, prompt, tokens, budget)
    before = timed_pass(target, prompt, TIMING_TOKENS, 1)
    run = generate(target, drafter, prompt, tokens, budget, breakdown=True)
    after = timed_pass(target, prompt, TIMING_TOKENS, 1)
    run_ms = statistics.fmean(step.draft_ms for step in run.steps) if run.steps else 0.0
    own = step_overhead_ms(run) if run.steps else None
    loop = LoopTiming(verify1_ms=(before.verify1_ms + after.verify1_ms) / 2,
                      overhead_ms=(before.overhead_ms + after.overhead_ms) / 2, steps=before.steps + after.steps)
    return {"budget": budget, "steps": len(run.steps), "run_ms": run_ms, "run_overhead_ms": own,
            "loop": asdict(loop)}


def cached_run_draft(target, name: str, drafter, options: dict, trajectory, trajectory_key: dict, budget: int,
                     tokens: int, machine: dict, root: Path) -> dict:
    """`measure_run_draft`, once per drafter identity, budget, calibration set and machine (cached like the
    curves, so `auto`'s choice is the same from run to run)."""
    key = {"format": CURVE_FORMAT, "trajectories": trajectory_key, "drafter": drafter_identity(name, drafter, options),
           "budget": budget, "tokens": tokens, "machine": machine,
           "measures": "run draft ms and overhead ms, loop timed beside it", "loop_tokens": TIMING_TOKENS}
    path = root / "calibration" / "curves" / f"{name}-run-{key_digest(key)}.json"
    return cached_json(path, key, lambda: measure_run_draft(target, drafter, trajectory, budget, tokens),
                       holding("run_ms", "run_overhead_ms", "loop"))


def draft_ratio(run_draft: dict, replayed: list[BudgetPoint]) -> dict:
    """``run_draft`` (`measure_run_draft`) with replay_ms, the replayed curve's draft ms at its budget, and
    ratio = run_ms / replay_ms (1 where replay measured no draft time): the manifest's ``draft_ratio`` entry."""
    replay_ms = next(point.draft_ms for point in replayed if point.budget == run_draft["budget"])
    return run_draft | {"replay_ms": replay_ms, "ratio": run_draft["run_ms"] / replay_ms if replay_ms > 0 else 1.0}


def with_draft_ratio(points: list[BudgetPoint], ratio: float) -> list[BudgetPoint]:
    """``points`` with each replayed draft cost scaled to a run's (`draft_ratio`), per question too."""
    return [replace(point, draft_ms=point.draft_ms * ratio,
                    by_question=[question | {"draft_ms": question["draft_ms"] * ratio} for question in point.by_question])
            for point in points]


def curve_entry(point: BudgetPoint) -> dict:
    """A curve point as the manifest records it: the point without its per-question records (the cached curve
    keeps them)."""
    entry = asdict(point)
    del entry["by_question"]
    return entry


def batch_draft_ms(target, name: str, drafter, options: dict, trajectories, trajectory_key: dict,
                   budgets: list[int], max_new_tokens: int, machine: dict, root: Path, batch: int) -> dict[int, float]:
    """The drafter's propose ms per step for ``batch`` rows at each budget (`RowsTogether` replayed over the
    first `BATCH_DRAFT_TURNS` calibration turns; cached like the curves)."""
    key = {"format": CURVE_FORMAT, "trajectories": trajectory_key, "drafter": drafter_identity(name, drafter, options),
           "candidates": budgets, "machine": machine, "batch": batch, "turns": BATCH_DRAFT_TURNS}

    def replayed() -> dict[str, float]:
        table = sweep(target, {name: RowsTogether(drafter, batch)},
                      [("calibration", t) for t in trajectories[:BATCH_DRAFT_TURNS]], budgets, max_new_tokens,
                      label=f"replay {name} x{batch} rows")
        return {str(row.budget): row.draft_ms for row in table[table["category"] == "overall"].itertuples()}

    path = root / "calibration" / "curves" / f"{name}-b{batch}-{key_digest(key)}.json"
    return cached_json(path, key, replayed, lambda value: {int(budget): float(ms) for budget, ms in value.items()})


def choose_at_batch(points: list[BudgetPoint], draft_ms: dict[int, float], profile, timing: LoopTiming) -> dict:
    """The choice at one batch size > 1 (a `BudgetChoice.batches` entry) from batch 1's replayed points, the
    propose cost at B (``draft_ms`` per budget) and B's profile and loop timing."""
    at_batch = [replace(point, draft_ms=draft_ms[point.budget]) for point in points]
    best, predictions = best_budget(at_batch, profile, timing.overhead_ms, timing.verify1_ms)
    return {"budget": best, "how": AUTO, "predicted_speedup": predictions[best],
            "curve": [curve_entry(p) | {"predicted_speedup": predictions[p.budget]} for p in at_batch]}


def choose_budgets(wanted: dict[str, int | str], calibrate) -> dict[str, BudgetChoice]:
    """Each drafter's `BudgetChoice`; ``calibrate(name)`` returns (points, profile, timing, the drafter's own
    overhead ms or None, the prefill share) for a drafter whose budget is ``auto`` (called only for those)."""
    choices = {}
    for name, budget in wanted.items():
        if split_entry(name)[0] == BASELINE:
            choices[name] = BudgetChoice(1, "baseline")
        elif budget != AUTO:
            choices[name] = BudgetChoice(int(budget), "fixed")
        else:
            points, profile, timing, own_overhead_ms, prefill_share = calibrate(name)
            steps = {p.budget: step_speedup(p, profile, timing.overhead_ms, timing.verify1_ms, own_overhead_ms)
                     for p in points}
            predictions = {budget: wall_speedup(step, prefill_share) for budget, step in steps.items()}
            best = best_of(predictions)  # as `best_budget` chooses
            curve = [curve_entry(p) | {"predicted_speedup": predictions[p.budget], "step_speedup": steps[p.budget],
                                       "predicted_relative_se": predicted_relative_se(
                                           p, profile, timing.overhead_ms, timing.verify1_ms, own_overhead_ms,
                                           prefill_share)}
                     for p in points]
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
    trajectories, trajectory_key, questions = calibration_trajectories(target, prompts, calibration, tokens,
                                                                       config.template, cache_root())
    machine = {name: profile.key.get(name) for name in ("device", "device_name", "dtype", "threads", "torch")}
    timing = cached_loop_timing(target, trajectories[0].prompt.tolist(), trajectory_key, machine, cache_root())
    prefill = cached_prefill_share(target, trajectories, trajectory_key, machine, cache_root())
    candidates = [b for b in (config.auto_budgets or DEFAULT_CANDIDATES) if b <= max(profile.sizes)] or [1]

    curves: dict[str, list[BudgetPoint]] = {}  # draft costs scaled by the drafter's run/replay draft ratio
    ratios: dict[str, dict] = {}

    def calibrate(name: str):
        if progress:
            print(f"specbench: choosing {name}'s tree budget (replay over {len(trajectories)} calibration turns)",
                  file=sys.stderr)
        limit = drafters[name].max_budget()  # larger budgets would replay the same trees
        mine = candidates if limit is None else sorted({b for b in candidates if b < limit} | {min(limit, max(candidates))})
        replayed = replayed_curve(target, name, drafters[name], options(name), trajectories, trajectory_key, mine,
                                  tokens, machine, cache_root(), questions)
        first, _ = best_budget(replayed, profile, timing.overhead_ms, timing.verify1_ms)
        run_draft = cached_run_draft(target, name, drafters[name], options(name), trajectories[0], trajectory_key,
                                     first, tokens, machine, cache_root())
        ratios[name] = draft_ratio(run_draft, replayed)
        curves[name] = with_draft_ratio(replayed, ratios[name]["ratio"])
        window = LoopTiming(**ratios[name]["loop"])  # v1 and o of the draft ms' window
        return curves[name], profile, window, ratios[name].get("run_overhead_ms"), prefill["share"]

    def options(name: str) -> dict:
        return config.drafter_options.get(split_entry(name)[0], {})

    choices = choose_budgets(wanted, calibrate)
    record = {"file": str(calibration), "source": calibrated_on,
              "questions": len(load_questions(calibration)), "turns": len(trajectories), "max_new_tokens": tokens,
              "candidates": candidates, "profile_source": source, "loop": asdict(timing), "prefill": prefill,
              "draft_ratio": ratios}
    batches = {}
    for size in (size for size in config.batch_sizes if size > 1):  # the module docstring's batch sizes
        if progress:
            print(f"specbench: choosing tree budgets at batch size {size}", file=sys.stderr)
        profile_b, source_b = batch_profile(target, size, cache_root())
        timing_b = cached_loop_timing(target, trajectories[0].prompt.tolist(), trajectory_key, machine, cache_root(),
                                      size)
        for name, points in curves.items():
            # the B-row propose cost as replayed, not scaled by batch 1's run/replay ratio: at batch 1 a real
            # propose runs 1.4-2.5x its replay (caches cold after the target's forward), at B rows the work
            # dominates; scaled, hydra's and eagle's draft at batch 4 came out 1.6-1.75x what runs measured,
            # unscaled 1.11x (docs/decisions.md, "Batching")
            draft = batch_draft_ms(target, name, drafters[name], options(name), trajectories, trajectory_key,
                                   [p.budget for p in points], tokens, machine, cache_root(), size)
            choices[name].batches[str(size)] = choose_at_batch(points, draft, profile_b, timing_b)
        batches[str(size)] = {"profile_source": source_b, "loop": asdict(timing_b)}
    if batches:
        record["batches"] = batches
    return choices, record
