"""`auto` budgets per batch size (issue 43, item 4): the verify-cost profile's batch axis, a drafter's propose cost
for B rows (`replay.RowsTogether`), the choice at each B (`choose.choose_at_batch`, recorded in
`BudgetChoice.batches`), and a sweep that runs each batch size at its own budget and resumes with more sizes."""

from __future__ import annotations

import json

import pytest

from specbench.harness.autobudget.choose import LoopTiming, choose_at_batch
from specbench.harness.autobudget.predict import BudgetPoint, best_budget
from specbench.harness.autobudget.profile import (
    VerifyProfile,
    cache_path,
    load_profile,
    measure_profile,
    profile_key,
    save_profile,
)
from specbench.harness.autobudget.spec import AUTO, BudgetChoice
from test_tree_budgets import tiny_run_setup  # noqa: F401  (the fixture)


def test_a_batch_profile_times_b_rows_and_reads_costs_at_the_bucket(tiny_run_setup, tmp_path):  # noqa: F811
    target, _, _ = tiny_run_setup
    profile = measure_profile(target, sizes=[1, 2, 4, 8], shapes=["bushy"], prefix=8, repeats=2, warmup=1, batch=3)
    assert profile.batch == 3 and profile.key == profile_key(target, batch=3) and profile.key["batch"] == 3
    assert "batch" not in profile_key(target)  # batch-1 keys (and cache file names) stay as they were
    assert cache_path(profile.key, tmp_path).name.endswith("-b3-active.json")  # eager: the active attention width
    assert cache_path(profile_key(target), tmp_path).name != cache_path(profile.key, tmp_path).name
    assert profile.cost_ms(3) == profile.cost_ms(4) and profile.cost_ms(5) == profile.cost_ms(8)  # padded to buckets
    again = load_profile(save_profile(profile, tmp_path / "b3.json"))
    assert again == profile and again.batch == 3
    single = VerifyProfile(key={}, sizes=[1, 4], ms={"chain": [1.0, 4.0]})
    assert single.cost_ms(3) == pytest.approx(3.0)  # batch 1 interpolates: its trees are not padded


def test_the_choice_at_a_batch_size_uses_that_sizes_costs():
    """Same replayed tau, but at B the verify cost grows with the tree and the propose cost is B rows': the
    best budget shrinks, and the prediction is the throughput ratio with B's terms."""
    points = [BudgetPoint(1, 1.0, 0.0), BudgetPoint(4, 1.8, 1.0), BudgetPoint(16, 2.2, 2.0)]
    flat = VerifyProfile(key={}, sizes=[1, 4, 16], ms={"chain": [10.0, 10.0, 10.5]})
    steep = VerifyProfile(key={}, sizes=[1, 4, 16], ms={"chain": [10.0, 16.0, 40.0]}, batch=8)
    assert best_budget(points, flat, 1.0, 10.0)[0] == 16
    choice = choose_at_batch(points, {1: 0.0, 4: 2.0, 16: 16.0}, steep, LoopTiming(10.0, 2.0, 10))
    assert choice["how"] == AUTO and choice["budget"] == 4
    assert choice["predicted_speedup"] == pytest.approx(1.8 * (10 + 2) / (16 + 2 + 2))
    assert [p["draft_ms"] for p in choice["curve"]] == [0.0, 2.0, 16.0]  # B rows' propose cost, not batch 1's
    recorded = BudgetChoice(16, AUTO, 2.0, batches={"8": choice})
    assert recorded.at(1) == 16 and recorded.at(8) == 4 and recorded.at(2) == 16  # a size not chosen: batch 1's
    assert BudgetChoice(**json.loads(json.dumps(recorded.to_json()))) == recorded


def test_rows_together_replays_like_the_drafter_and_proposes_b_rows_at_once(tiny_run_setup):  # noqa: F811
    from specbench.drafters.ngram import NgramDrafter
    from specbench.harness.autobudget.replay import RowsTogether, replay
    from specbench.harness.autobudget.trajectories import record_trajectory

    target, _, _ = tiny_run_setup
    prompt = target.tokenizer.encode("abc abc abc abc abc")
    trajectory = record_trajectory(target, prompt, 16)
    calls = []

    class Counting(NgramDrafter):
        def propose_rows(self, rows):
            calls.append(len(rows))
            return super().propose_rows(rows)

    alone = replay(target, NgramDrafter(), trajectory, 16, 4)
    together = replay(target, RowsTogether(Counting(), 3), trajectory, 16, 4)
    assert together.output_ids == alone.output_ids and together.accept_lengths == alone.accept_lengths
    assert calls and set(calls) == {3} and len(calls) == len(together.steps)


def test_a_sweep_runs_each_batch_size_at_its_own_auto_budget_and_resume_adds_sizes(tiny_run_setup, tmp_path,  # noqa: F811
                                                                                    monkeypatch):
    from specbench.harness.autobudget import choose
    from specbench.model_source import cache_root
    from specbench.results import load_run
    from test_tree_budgets import run_tiny

    target, calibration, profile = tiny_run_setup
    out = tmp_path / "run"
    # batch 1: the flat profile given (large trees are free); batch 2: a cached steep one (every node costs)
    steep = VerifyProfile(key=profile_key(target, batch=2), sizes=[1, 2, 4, 8], ms={"bushy": [5.0, 50.0, 100.0, 200.0]},
                          batch=2)
    save_profile(steep, cache_path(steep.key, cache_root()))
    # a replayed curve whose tau grows with the budget (the tiny random model's own would be near 1 everywhere)
    monkeypatch.setattr(choose, "replayed_curve", lambda *args: [BudgetPoint(b, float(b), 0.01) for b in args[6]])
    # batch 1's draft cost is the replay's times the run/replay ratio; at B > 1 the B-row replay's as it is
    monkeypatch.setattr(choose, "cached_run_draft", lambda *args: {
        "budget": args[6], "steps": 8, "run_ms": 0.02, "loop": {"verify1_ms": 5.0, "overhead_ms": 0.1, "steps": 8}})
    monkeypatch.setattr(choose, "batch_draft_ms", lambda *args: {b: 0.005 for b in args[6]})
    options = dict(calibration=str(calibration), profile=str(profile), auto_budgets=[1, 2, 4, 8], limit=1)
    run_tiny(target, out, batch_size=[1, 2], **options)
    manifest = json.loads((out / "manifest.json").read_text())
    ngram = manifest["budgets"]["ngram"]
    at_two = ngram["batches"]["2"]
    assert ngram["budget"] > 1 and at_two["how"] == AUTO and at_two["budget"] == 1  # each size its own choice
    best = max(p["predicted_speedup"] for p in at_two["curve"])
    assert at_two["predicted_speedup"] >= best * 0.995
    assert [p["tau"] for p in at_two["curve"]] == [p["tau"] for p in ngram["curve"]]  # rows accept what one does
    assert [p["draft_ms"] for p in ngram["curve"]] == pytest.approx([0.02] * len(ngram["curve"]))
    assert {p["draft_ms"] for p in at_two["curve"]} == {0.005}
    assert manifest["budgets"]["vanilla"]["batches"] == {}
    batch_record = manifest["calibration"]["batches"]["2"]
    assert batch_record["profile_source"] == str(cache_path(steep.key, cache_root()))
    assert batch_record["loop"]["verify1_ms"] > 0
    runs = load_run(out)
    assert {a.tree_budget for a in runs["ngram"]} == {ngram["budget"]}
    at_two_records = [json.loads(line) for line in (out / "batch-2" / "answers" / "ngram.jsonl").read_text().splitlines()]
    assert {r["tree_budget"] for r in at_two_records} == {at_two["budget"]}

    from specbench.reports.report import build_report
    from specbench.reports.runs import load_runs

    (section,) = build_report(load_runs([out])).sections[1:]
    table = next(t for t in section.tables if t.name == "batch_sizes").data.set_index(["drafter", "batch_size"])
    assert table.loc[("ngram", 1), "tree_budget"] == ngram["budget"] and table.loc[("ngram", 2), "tree_budget"] == 1
    assert table.loc[("ngram", 2), "predicted_speedup"] == pytest.approx(at_two["predicted_speedup"])
    assert table.loc[("ngram", 1), "predicted_speedup"] == pytest.approx(ngram["predicted_speedup"])

    run_tiny(target, out, batch_size=[1, 2, 3], resume=True, **options)
    again = json.loads((out / "manifest.json").read_text())["budgets"]["ngram"]
    assert again["batches"]["2"] == at_two and again["budget"] == ngram["budget"]  # what ran stays recorded
    assert again["batches"]["3"]["how"] == AUTO  # measured here: the tiny model's own profile at batch 3
    assert load_profile(cache_path(profile_key(target, batch=3), cache_root())).batch == 3
    at_three = [json.loads(line) for line in (out / "batch-3" / "answers" / "ngram.jsonl").read_text().splitlines()]
    assert {r["tree_budget"] for r in at_three} == {again["batches"]["3"]["budget"]}


def test_a_batch_step_costs_its_largest_tree():
    """At B > 1 every row's tree is padded to the largest's bucket: a drafter proposing 1 node half the time and 4
    the other half pays r(4) unless every row drew 1 node (P = 0.5^B); one that always proposes 4 pays r(4) at any
    B; at batch 1 the mean of the rows' own costs is kept."""
    from specbench.harness.autobudget.predict import verify_ratio

    ms = {"chain": [10.0, 12.0, 15.0, 20.0], "bushy": [10.0, 12.0, 15.0, 20.0]}
    mixed = BudgetPoint(4, 2.0, 0.0, {"1:0": 50, "4:3": 50})
    fixed = BudgetPoint(4, 2.0, 0.0, {"4:3": 100})
    for batch in (2, 4, 8):
        profile = VerifyProfile(key={"batch": batch}, sizes=[1, 2, 4, 8], ms=ms, batch=batch)
        assert verify_ratio(mixed, profile) == pytest.approx(0.5 ** batch * 1.0 + (1 - 0.5 ** batch) * 1.5)
        assert verify_ratio(fixed, profile) == pytest.approx(1.5)
    single = VerifyProfile(key={}, sizes=[1, 2, 4, 8], ms={"chain": [10.0, 12.0, 15.0, 20.0]})
    assert verify_ratio(mixed, single) == pytest.approx(0.5 * 1.0 + 0.5 * single.relative(4, "chain"))


#: the synthetic slowdown of one timed pass: far above the tiny target's own verify, so a loaded machine cannot
#: blur the two (an added number, no sleep)
SLOWDOWN_MS = 1000.0


@pytest.mark.parametrize("batch, slow", [(1, 1), (1, 3), (2, 2)])
def test_the_loop_timing_keeps_its_fastest_pass(llama_target, monkeypatch, batch, slow):
    """v1 is what replayed draft ms are weighed against: a busy moment during one timed pass must not set it.
    Every verify of timed pass ``slow`` is made SLOWDOWN_MS slower (as a main job's v1 once came out 1.41x the run's);
    v1 is the fastest of the timed passes, never the slow one, whether it comes first, last or between."""
    import specbench.harness.autobudget.choose as choose

    real = choose.timed_pass
    calls = []

    def slowed(*args, **kwargs):
        timing = real(*args, **kwargs)
        if len(calls) == slow:  # calls[0] is the untimed pass
            timing = LoopTiming(timing.verify1_ms + SLOWDOWN_MS, timing.overhead_ms, timing.steps)
        calls.append(timing)
        return timing

    monkeypatch.setattr(choose, "timed_pass", slowed)
    timing = choose.measure_loop_timing(llama_target, [5, 6, 7, 8], tokens=12, batch=batch)
    assert calls[0] is None and len(calls) == choose.TIMING_PASSES + 1
    assert calls[slow].verify1_ms > SLOWDOWN_MS and timing.steps > 0
    assert timing.verify1_ms < SLOWDOWN_MS and timing.verify1_ms == min(t.verify1_ms for t in calls[1:])


def test_the_draft_ratio_decode_is_bracketed_by_the_loop_timing_it_is_weighed_against(llama_target, monkeypatch):
    """The drafter's real decode (its run draft ms) runs between two timed plain-decoding passes, and the recorded
    loop is their mean: v1 and the draft ms share one window of the machine's pace. A pass made SLOWDOWN_MS slower moves
    v1 by half of it, as a run in a slow window would be priced."""
    import specbench.harness.autobudget.choose as choose
    from specbench.drafters.ngram import NgramDrafter
    from specbench.drafters.vanilla import VanillaDrafter
    from specbench.harness.autobudget.trajectories import record_trajectory

    events = []
    real_pass, real_generate = choose.timed_pass, choose.generate

    def timed(*args, **kwargs):
        timing = real_pass(*args, **kwargs)
        events.append("loop")
        return LoopTiming(timing.verify1_ms + SLOWDOWN_MS * (events.count("loop") == 2), timing.overhead_ms, timing.steps)

    def decoded(target, drafter, *args, **kwargs):
        if not isinstance(drafter, VanillaDrafter):  # the timed passes' own decodes are plain
            events.append("draft" + (" timed" if kwargs.get("breakdown") else ""))
        return real_generate(target, drafter, *args, **kwargs)

    monkeypatch.setattr(choose, "timed_pass", timed)
    monkeypatch.setattr(choose, "generate", decoded)
    trajectory = record_trajectory(llama_target, [5, 6, 7, 8, 5, 6, 7], 12)
    measured = choose.measure_run_draft(llama_target, NgramDrafter(), trajectory, 4, 12)
    assert events == ["draft", "loop", "draft timed", "loop"]
    loop = LoopTiming(**measured["loop"])
    half = SLOWDOWN_MS / 2  # the mean of a normal and a slowed pass, plus the tiny target's real v1 (under 250 ms)
    assert half < loop.verify1_ms < half + 250.0 and loop.steps > 0 and loop.overhead_ms >= 0


def test_the_batch_1_choice_is_priced_with_the_drafters_own_loop_timing(tiny_run_setup, tmp_path, monkeypatch):  # noqa: F811
    """`auto` at batch 1 predicts with the v1 and overhead timed beside the drafter's draft ratio, not the loop
    timed once at the start of calibration: with the drafter's v1 set 100x the start's, drafting is priced as
    nearly free, and the recorded prediction is the one made with that v1."""
    import specbench.harness.autobudget.choose as choose
    from specbench.harness.autobudget.predict import predicted_speedup, verify_ratio
    from test_tree_budgets import run_tiny

    target, calibration, profile_path = tiny_run_setup
    monkeypatch.setattr(choose, "replayed_curve", lambda *args: [BudgetPoint(b, float(b), 1.0) for b in args[6]])
    own = {"verify1_ms": 500.0, "overhead_ms": 0.5, "steps": 8}
    monkeypatch.setattr(choose, "cached_run_draft", lambda *args: {"budget": args[6], "steps": 8, "run_ms": 1.0,
                                                                    "loop": own})
    out = tmp_path / "run"
    run_tiny(target, out, calibration=str(calibration), profile=str(profile_path), auto_budgets=[1, 2, 4, 8], limit=1)
    manifest = json.loads((out / "manifest.json").read_text())
    profile = VerifyProfile.from_json(manifest["profile"], "manifest")
    assert manifest["calibration"]["loop"]["verify1_ms"] < own["verify1_ms"] / 10
    share = manifest["calibration"]["prefill"]["share"]
    for point in manifest["budgets"]["ngram"]["curve"]:
        priced = BudgetPoint(point["budget"], point["tau"], point["draft_ms"], point["trees"])
        assert point["predicted_speedup"] == pytest.approx(predicted_speedup(priced, profile, 0.5, 500.0,
                                                                             prefill_share=share))

    from specbench.reports.cost_model import cost_model_table
    from specbench.reports.runs import load_runs

    table = cost_model_table(load_runs([out])[0]).data.set_index("drafter")  # the report backs V out with that v1
    assert table.loc["ngram", "verify1_pred"] == 500.0 and table.loc["ngram", "loop_pred"] == 0.5
    assert table.loc["vanilla", "verify1_pred"] == manifest["calibration"]["loop"]["verify1_ms"]
    choice = manifest["budgets"]["ngram"]
    point = next(p for p in choice["curve"] if p["budget"] == choice["budget"])
    priced = BudgetPoint(point["budget"], point["tau"], point["draft_ms"], point["trees"])
    assert table.loc["ngram", "verify_pred"] == pytest.approx(500.0 * verify_ratio(priced, profile))


def test_the_batch_1_prediction_carries_the_drafters_own_overhead_and_the_prefill(
        tiny_run_setup, tmp_path, monkeypatch):  # noqa: F811
    """At batch 1 the drafter's side of a step costs its own overhead from its real decode (``run_overhead_ms``),
    not plain decoding's, and the prediction is the wall-time speedup with the calibration's measured prefill
    share: the recorded prediction is (1 + p) / (p + 1 / S) of the recorded step prediction S, S is priced with
    o', the budget is the one the step prediction picks, and the report's cost model shows o' and backs V out
    exactly. A drafter's 40 ms of acceptance per step must lower its prediction."""
    import specbench.harness.autobudget.choose as choose
    from specbench.harness.autobudget.predict import best_budget, step_speedup, verify_ratio
    from specbench.metrics import wall_speedup
    from test_tree_budgets import run_tiny

    target, calibration, profile_path = tiny_run_setup
    monkeypatch.setattr(choose, "replayed_curve", lambda *args: [BudgetPoint(b, float(b), 1.0) for b in args[6]])
    own = {"verify1_ms": 50.0, "overhead_ms": 0.5, "steps": 8}
    monkeypatch.setattr(choose, "cached_run_draft", lambda *args: {"budget": args[6], "steps": 8, "run_ms": 1.0,
                                                                    "run_overhead_ms": 40.0, "loop": own})
    out = tmp_path / "run"
    run_tiny(target, out, calibration=str(calibration), profile=str(profile_path), auto_budgets=[1, 2, 4, 8], limit=1)
    manifest = json.loads((out / "manifest.json").read_text())
    profile = VerifyProfile.from_json(manifest["profile"], "manifest")
    prefill = manifest["calibration"]["prefill"]
    assert prefill["prefill_ms"] > 0 and prefill["new_tokens"] > 1 and prefill["share"] > 0
    assert prefill["share"] == pytest.approx(prefill["prefill_ms"] / (
        (prefill["new_tokens"] - 1) * (prefill["verify1_ms"] + prefill["overhead_ms"])))
    choice = manifest["budgets"]["ngram"]
    points = [BudgetPoint(p["budget"], p["tau"], p["draft_ms"], p["trees"]) for p in choice["curve"]]
    for point, priced in zip(choice["curve"], points):
        step = step_speedup(priced, profile, 0.5, 50.0, 40.0)
        assert point["step_speedup"] == pytest.approx(step)
        assert point["predicted_speedup"] == pytest.approx(wall_speedup(step, prefill["share"]))
        assert min(step, 1.0) < point["predicted_speedup"] < max(step, 1.0)  # the prefill pulls towards 1
        assert step < step_speedup(priced, profile, 0.5, 50.0)  # o' = 40 ms costs
    assert choice["budget"] == best_budget(points, profile, 0.5, 50.0, 40.0, prefill["share"])[0]

    from specbench.reports.cost_model import cost_model_table
    from specbench.reports.runs import load_runs

    table = cost_model_table(load_runs([out])[0]).data.set_index("drafter")
    assert table.loc["ngram", "loop_pred"] == 40.0
    point = next(p for p in points if p.budget == choice["budget"])
    assert table.loc["ngram", "verify_pred"] == pytest.approx(50.0 * verify_ratio(point, profile))


def test_a_real_decode_records_its_own_overhead_and_the_prefill_share_is_measured(llama_target):
    """`measure_run_draft` records the drafter's own ms per step outside verify and draft, and
    `measure_prefill_share` times every calibration prompt's prefill beside a plain-decoding pass."""
    import specbench.harness.autobudget.choose as choose
    from specbench.drafters.ngram import NgramDrafter
    from specbench.harness.autobudget.trajectories import record_trajectory

    trajectories = [record_trajectory(llama_target, prompt, 12) for prompt in ([5, 6, 7, 8, 5, 6, 7], [9, 3, 4])]
    measured = choose.measure_run_draft(llama_target, NgramDrafter(), trajectories[0], 4, 12)
    assert measured["run_overhead_ms"] > 0 and set(measured["loop"]) == {"verify1_ms", "overhead_ms", "steps"}
    prefill = choose.measure_prefill_share(llama_target, trajectories)
    assert prefill["prefill_ms"] > 0 and prefill["verify1_ms"] > 0
    assert prefill["new_tokens"] == pytest.approx(sum(len(t.continuation) for t in trajectories) / 2)
    assert 0 < prefill["share"] == pytest.approx(prefill["prefill_ms"] / (
        (prefill["new_tokens"] - 1) * (prefill["verify1_ms"] + prefill["overhead_ms"])))
