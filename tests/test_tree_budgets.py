"""`--tree-budget`: the spec (N, auto, per drafter), tree-shape-aware verify costs, and `auto` in a run:
each drafter's budget is chosen from a replay over the calibration set, recorded in the answers, the
manifest and summary.csv, and kept by a resumed run."""

from __future__ import annotations

import json
import math

import pytest
import torch

from specbench.errors import SpecbenchError
from specbench.harness.autobudget.predict import BudgetPoint, best_budget, predicted_speedup, tree_ratio, verify_ratio
from specbench.harness.autobudget.profile import VerifyProfile, save_profile
from specbench.harness.autobudget.spec import AUTO, parse_budget_spec
from test_cli import assert_one_line_error, cli_in_process

DRAFTERS = ["vanilla", "ngram", "hydra", "medusa"]


@pytest.mark.parametrize("spec, expected", [
    ("auto", {"vanilla": 1, "ngram": AUTO, "hydra": AUTO, "medusa": AUTO}),
    (16, {"vanilla": 1, "ngram": 16, "hydra": 16, "medusa": 16}),
    ("hydra=2,medusa=3", {"vanilla": 1, "ngram": AUTO, "hydra": 2, "medusa": 3}),
    ("hydra=auto, 8", {"vanilla": 1, "ngram": 8, "hydra": AUTO, "medusa": 8}),
    ("vanilla=5", {"vanilla": 1, "ngram": AUTO, "hydra": AUTO, "medusa": AUTO}),  # vanilla proposes the root only
])
def test_budget_spec(spec, expected):
    assert parse_budget_spec(spec, DRAFTERS) == expected


@pytest.mark.parametrize("spec, fragment", [
    ("0", "at least 1"), ("four", "expected a node count or 'auto'"), ("hydra=0", "at least 1"),
    ("ctc=4", "not in --drafters"), ("hydra=2,hydra=3", "more than once"), ("4,8", "more than one default"),
    (" , ", "empty"),
])
def test_bad_budget_specs_are_one_line(spec, fragment):
    with pytest.raises(SpecbenchError, match=fragment):
        parse_budget_spec(spec, DRAFTERS)


@pytest.mark.parametrize("spec, fragment", [("hydra=x", "--tree-budget 'hydra=x'"), ("nosuch=2", "not in --drafters")])
def test_bad_budget_specs_exit_2_on_the_command_line(spec, fragment):
    assert_one_line_error(cli_in_process("run", "--drafters", "vanilla,hydra", "--tree-budget", spec), fragment)


def two_shapes(chain: list[float], bushy: list[float], sizes=(1, 2, 4, 8)) -> VerifyProfile:
    return VerifyProfile(key={"model": "m"}, sizes=list(sizes), ms={"chain": chain, "bushy": bushy})


def test_verify_cost_follows_the_trees_a_drafter_really_proposes():
    profile = two_shapes([10, 12, 14, 18], [10, 12, 20, 30])
    assert tree_ratio(profile, 8, 7) == pytest.approx(1.8)  # a chain of 8 nodes
    assert tree_ratio(profile, 8, 2) == pytest.approx(3.0)  # as deep as the profile's bushy tree of 8
    assert 1.8 < tree_ratio(profile, 8, 4) < 3.0
    # a drafter that proposes the root alone at half its steps costs half as much more as one that never does
    full = BudgetPoint(8, 2.0, 0.0, {"8:7": 10})
    half = BudgetPoint(8, 2.0, 0.0, {"8:7": 5, "1:0": 5})
    assert verify_ratio(full, profile) == pytest.approx(1.8) and verify_ratio(half, profile) == pytest.approx(1.4)
    assert predicted_speedup(half, profile) > predicted_speedup(full, profile)
    assert verify_ratio(BudgetPoint(4, 1.5, 0.0), profile) == pytest.approx(profile.relative(4))  # no trees: the budget


def test_the_measured_scale_replaces_the_profiles_and_near_ties_go_to_the_smaller_budget():
    profile = two_shapes([10, 10, 10, 10], [10, 10, 10, 10])
    point = BudgetPoint(4, 2.0, 1.0)
    assert predicted_speedup(point, profile, overhead_ms=1.0, verify1_ms=50.0) == pytest.approx(2.0 * 51 / 52)
    points = [BudgetPoint(1, 1.0, 0.0), BudgetPoint(2, 1.5, 0.0), BudgetPoint(4, 1.504, 0.0), BudgetPoint(8, 1.505, 0.0)]
    best, predictions = best_budget(points, profile)
    assert best == 2 and predictions[8] > predictions[2]  # within 0.5%: the cheaper tree


@pytest.fixture()
def tiny_run_setup(tmp_path, monkeypatch):
    """A tiny target, a two-question calibration file, a flat profile and a private cache."""
    from conftest import build_tiny_model
    from specbench.model import TargetModel
    from test_export import char_bpe_tokenizer

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    calibration = tmp_path / "calibration.jsonl"
    calibration.write_text("".join(json.dumps({"question_id": i, "category": "c", "turns": [text]}) + "\n"
                                   for i, text in enumerate(["count to ten", "abc abc abc abc"])))
    profile = save_profile(VerifyProfile(key={"model": "tiny"}, sizes=[1, 2, 4, 8], ms={"chain": [5.0, 5.0, 5.1, 5.2]}),
                           tmp_path / "flat.json")
    target = TargetModel(build_tiny_model("llama"), char_bpe_tokenizer(tmp_path / "tok"))
    return target, calibration, profile


def run_tiny(target, out, **options):
    from specbench.harness.runner import Run, RunConfig

    settings = dict(drafters=["vanilla", "ngram"], bench="demo", categories=["math"], limit=2, max_new_tokens=12,
                    warmup=False) | options
    config = RunConfig(out=str(out), **settings)
    return Run(config, progress=False, target=target).execute()


def test_auto_chooses_records_and_resumes_with_the_same_budgets(tiny_run_setup, tmp_path, monkeypatch):
    from specbench.harness.autobudget import choose as budgets_module
    from specbench.reports.summary import write_summary
    from specbench.results import load_run

    target, calibration, profile = tiny_run_setup
    out = tmp_path / "run"
    run_tiny(target, out, calibration=str(calibration), profile=str(profile), auto_budgets=[1, 2, 4, 8])
    manifest = json.loads((out / "manifest.json").read_text())
    choice = manifest["budgets"]["ngram"]
    assert manifest["budgets"]["vanilla"] == {"budget": 1, "how": "baseline", "predicted_speedup": None, "curve": [],
                                           "batches": {}}
    # ngram's trees never exceed max_budget() = 1 + 4 drafts: 8 is replaced by 5, which gives the same trees
    assert choice["how"] == AUTO and [point["budget"] for point in choice["curve"]] == [1, 2, 4, 5]
    best = max(point["predicted_speedup"] for point in choice["curve"])
    assert choice["budget"] in [p["budget"] for p in choice["curve"] if p["predicted_speedup"] >= best * 0.995]
    assert manifest["calibration"]["questions"] == 2 and manifest["calibration"]["turns"] == 2
    # the noise over the two calibration questions: none in tau at budget 1 (1 on every question) and next to none
    # in the prediction (one-node trees on every question; only the timed draft ms per step differ), recorded at
    # every budget; the per-question records stay in the cached curve, out of the manifest
    first = choice["curve"][0]
    assert first["tau_se"] == 0.0 and first["predicted_relative_se"] < 0.01
    assert all(p["tau_se"] is not None and p["predicted_relative_se"] is not None for p in choice["curve"])
    assert all("by_question" not in p for p in choice["curve"])

    assert manifest["calibration"]["loop"]["verify1_ms"] > 0
    runs = load_run(out)
    assert {a.tree_budget for a in runs["ngram"]} == {choice["budget"]} and {a.tree_budget for a in runs["vanilla"]} == {1}
    summary = write_summary(out)
    assert set(summary[summary["drafter"] == "ngram"]["tree_budget"]) == {choice["budget"]}

    # `benchmarks.calibration_noise` replays the calibration again and gives the recorded figures back: tau and its
    # SE exactly (replay is deterministic), the prediction's SE closely (its draft ms are timed again)
    from benchmarks.calibration_noise import noise_table

    noise = noise_table(out, target=target).set_index("drafter").loc["ngram"]
    point = next(p for p in choice["curve"] if p["budget"] == choice["budget"])
    assert noise["tau_here"] == pytest.approx(point["tau"]) and noise["tau_se"] == pytest.approx(point["tau_se"])
    assert noise["predicted_relative_se"] == pytest.approx(point["predicted_relative_se"], rel=0.25, abs=0.01)

    # drop the last question of ngram and resume: the manifest's budgets are kept, nothing is recalibrated
    path = out / "answers" / "ngram.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    monkeypatch.setattr(budgets_module, "replayed_curve", lambda *a, **k: pytest.fail("recalibrated on resume"))
    run_tiny(target, out, calibration=str(calibration), profile=str(profile), auto_budgets=[1, 2, 4, 8], resume=True)
    assert {a.tree_budget for a in load_run(out)["ngram"]} == {choice["budget"]}
    assert len(load_run(out)["ngram"]) == 2


def test_auto_scales_replayed_draft_costs_by_the_drafters_run_replay_ratio(tiny_run_setup, tmp_path, monkeypatch):
    """A drafter whose propose costs 50 ms more in a run than in replay (as a CPU's caches, emptied by the target's
    forward, make it): `auto` measures the ratio on the first calibration turn and predicts with run costs."""
    import time

    from specbench.drafters.ngram import NgramDrafter
    from specbench.harness.autobudget import replay as replay_module
    from specbench.harness.autobudget.choose import draft_ratio, measure_run_draft
    from specbench.harness.autobudget.trajectories import record_trajectory
    from specbench.registry import register_drafter

    replaying = []
    forward_tree = replay_module.TrajectoryTarget.forward_tree

    def flagged(self, tree, cache):
        replaying.append(True)
        return forward_tree(self, tree, cache)

    monkeypatch.setattr(replay_module.TrajectoryTarget, "forward_tree", flagged)

    class ColdInRuns(NgramDrafter):
        def reset(self, target):
            super().reset(target)
            replaying.clear()

        def propose(self, ctx):
            if not replaying:  # no stand-in forward has run in this sequence: a real run
                time.sleep(0.05)  # far above ngram's own propose, even on a loaded machine
            return super().propose(ctx)

    target, calibration, profile = tiny_run_setup
    trajectory = record_trajectory(target, target.tokenizer.encode("abc abc abc abc"), 12)
    measured = measure_run_draft(target, ColdInRuns(), trajectory, 4, 12)
    replayed = replay_module.replay(target, ColdInRuns(), trajectory, 12, 4)
    replay_ms = sum(step.draft_ms for step in replayed.steps) / len(replayed.steps)
    assert measured["run_ms"] >= 50 > replay_ms
    ratio = draft_ratio(measured, [BudgetPoint(2, 1.0, 1.0), BudgetPoint(4, 1.5, replay_ms)])
    assert ratio["replay_ms"] == replay_ms and ratio["ratio"] == pytest.approx(measured["run_ms"] / replay_ms)

    from specbench import registry

    monkeypatch.setattr(registry, "_decorated", dict(registry._decorated))  # the plug-in leaves with the test
    register_drafter("cold-ngram")(ColdInRuns)
    out = tmp_path / "run"
    run_tiny(target, out, drafters=["vanilla", "cold-ngram"], calibration=str(calibration), profile=str(profile),
             auto_budgets=[1, 2, 4])
    manifest = json.loads((out / "manifest.json").read_text())
    ratio = manifest["calibration"]["draft_ratio"]["cold-ngram"]
    assert ratio["ratio"] > 10 and ratio["run_ms"] >= 50
    assert all(point["draft_ms"] >= 50 for point in manifest["budgets"]["cold-ngram"]["curve"] if point["budget"] > 1)

    from specbench.reports.report import build_report
    from specbench.reports.runs import load_runs

    tables = {t.name: t for section in build_report(load_runs([out])).sections for t in section.tables}
    row = tables["budgets"].data.set_index("drafter").loc["cold-ngram"]
    assert row["draft_ratio"] == pytest.approx(ratio["ratio"])  # the report's Tree budgets table shows c
    assert "Draft ratio" in tables["budgets"].display.columns
    assert row["predicted_relative_se"] >= 0 and "Measured / predicted" in tables["budgets"].display.columns
    assert math.isnan(row["miss_se"])  # two questions: no measured CI shown, so no verdict


def test_calibration_decodes_every_turn_as_a_run_does(tiny_run_setup, tmp_path):
    """A two-turn calibration question gives two trajectories; the second turn's prompt carries the target's
    own greedy first answer, as `question_trajectories` (what a run decodes) builds it."""
    from specbench.harness.autobudget.calibration import calibration_trajectories
    from specbench.harness.autobudget.trajectories import question_trajectories
    from specbench.prompts import PromptBuilder
    from specbench.questions import load_questions

    target, _, _ = tiny_run_setup
    two_turns = tmp_path / "two.jsonl"
    two_turns.write_text(json.dumps({"question_id": 1, "category": "c", "turns": ["count to ten", "and back"]}) + "\n")
    prompts = PromptBuilder(target.tokenizer, None)
    trajectories, key, questions = calibration_trajectories(target, prompts, two_turns, 12, None, tmp_path / "cache")
    expected = question_trajectories(target, prompts, load_questions(two_turns)[0], 12)
    assert len(trajectories) == 2 and key["turns"] == "all" and questions == [0, 0]  # one question, two turns
    for got, want in zip(trajectories, expected):
        assert torch.equal(got.prompt, want.prompt) and torch.equal(got.continuation, want.continuation)
    assert len(trajectories[1].prompt) > len(trajectories[0].prompt) + len(trajectories[0].continuation)
    first_answer = prompts.answer_text(trajectories[0].continuation.tolist())
    assert first_answer and first_answer in target.tokenizer.decode(trajectories[1].prompt.tolist())
    again, _, _ = calibration_trajectories(target, prompts, two_turns, 12, None, tmp_path / "cache")  # from the cache
    assert [torch.equal(a.prompt, b.prompt) for a, b in zip(again, trajectories)] == [True, True]


def test_replay_trajectories_are_recorded_once_per_question_set(tiny_run_setup, tmp_path, monkeypatch):
    """`specbench replay` records a question set's trajectories once; a second replay reads them (the target
    is not run), and another selection of questions (as --limit makes) is another file."""
    import specbench.harness.autobudget.trajectories as trajectory_cache
    from specbench.prompts import PromptBuilder
    from specbench.questions import load_questions

    target, calibration, _ = tiny_run_setup
    questions = load_questions(calibration)
    prompts = PromptBuilder(target.tokenizer, None)
    first, path = trajectory_cache.replay_trajectories(target, prompts, questions, 12, None, tmp_path / "cache")
    assert path.exists() and [len(turns) for turns in first] == [1, 1]
    monkeypatch.setattr(trajectory_cache, "question_trajectories", lambda *a: pytest.fail("recorded again"))
    again, same = trajectory_cache.replay_trajectories(target, prompts, questions, 12, None, tmp_path / "cache")
    assert same == path
    for got, want in zip(again, first):
        assert torch.equal(got[0].continuation, want[0].continuation) and torch.equal(got[0].hidden, want[0].hidden)
    monkeypatch.undo()
    _, other = trajectory_cache.replay_trajectories(target, prompts, questions[:1], 12, None, tmp_path / "cache")
    _, longer = trajectory_cache.replay_trajectories(target, prompts, questions[:1], 16, None, tmp_path / "cache")
    assert len({path, other, longer}) == 3


def test_heldout_calibration_is_the_benchmarks_questions_the_run_leaves_out(tiny_run_setup, tmp_path):
    from specbench.harness.autobudget.calibration import heldout_questions
    from specbench.questions import load_questions
    from specbench.results import load_run

    picked = heldout_questions("demo", ["math", "coding"], 1)
    assert [q.category for q in picked] == ["math", "coding"]  # the second (last) of each; the run takes the first
    with pytest.raises(SpecbenchError, match="leaves out"):
        heldout_questions("demo", ["math"], 2)  # demo has two per category: none left

    target, _, profile = tiny_run_setup
    out = tmp_path / "run"
    run_tiny(target, out, calibration="heldout", profile=str(profile), auto_budgets=[1, 2], limit=1)
    record = json.loads((out / "manifest.json").read_text())["calibration"]
    calibrated = load_questions(record["file"])
    answered = {a.question_id for records in load_run(out).values() for a in records}
    assert record["source"] == "heldout" and record["questions"] == 1 == len(calibrated)
    assert record["turns"] == len(calibrated[0].turns) and calibrated[0].question_id not in answered
    assert calibrated[0].category == "math"


def test_auto_calibrates_on_held_out_questions_by_default_when_the_run_leaves_some_out(tiny_run_setup, tmp_path):
    """No --calibration: held-out benchmark questions when every category of the run keeps one back, the
    package's set when the run answers a whole category; an explicit choice always wins ('shipped' is the
    package set's earlier name)."""
    from specbench.harness.autobudget.calibration import HELDOUT, PACKAGE, SHIPPED, calibration_source

    assert calibration_source(None, "demo", ["math", "coding"], 1) == HELDOUT
    assert calibration_source(None, "demo", ["math", "coding"], 2) == PACKAGE  # demo has two per category
    assert calibration_source(None, "demo", ["math"], None) == PACKAGE
    assert calibration_source(PACKAGE, "demo", ["math"], 1) == PACKAGE
    assert calibration_source(SHIPPED, "demo", ["math"], 1) == PACKAGE
    assert calibration_source("my.jsonl", "demo", ["math"], 1) == "my.jsonl"

    target, _, profile = tiny_run_setup
    out = tmp_path / "run"
    run_tiny(target, out, profile=str(profile), auto_budgets=[1, 2], limit=1)
    record = json.loads((out / "manifest.json").read_text())["calibration"]
    assert record["source"] == HELDOUT and record["questions"] == 1


def test_fixed_per_drafter_budgets_need_no_calibration(tiny_run_setup, tmp_path):
    target, _, _ = tiny_run_setup
    out = run_tiny(target, tmp_path / "run", tree_budget="ngram=3")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["budgets"]["ngram"]["budget"] == 3 and manifest["budgets"]["ngram"]["how"] == "fixed"
    assert manifest["calibration"] is None
    assert not (tmp_path / "cache" / "calibration").exists()


def test_calibration_trajectories_and_curves_are_cached(tiny_run_setup, tmp_path):
    target, calibration, profile = tiny_run_setup
    run_tiny(target, tmp_path / "a", calibration=str(calibration), profile=str(profile), auto_budgets=[1, 4])
    cached = sorted(p.name for p in (tmp_path / "cache" / "calibration").rglob("*") if p.is_file())
    assert len([n for n in cached if n.startswith("trajectories-")]) == 1
    assert len([n for n in cached if n.startswith("ngram-run-")]) == 1  # the real decode's draft ms and loop
    assert len([n for n in cached if n.startswith("ngram-") and "-run-" not in n]) == 1  # the curve
    assert len([n for n in cached if n.startswith("loop-")]) == 1  # the loop is timed once per machine
    run_tiny(target, tmp_path / "b", calibration=str(calibration), profile=str(profile), auto_budgets=[1, 4])
    assert sorted(p.name for p in (tmp_path / "cache" / "calibration").rglob("*") if p.is_file()) == cached
    assert len([n for n in cached if n.startswith("prefill-")]) == 1  # the prefill share, once per machine


@pytest.mark.parametrize("stored", ['{"key": {}, "value": [{"budget": 4, "tau": 1.5, "draft_ms": 2.0, "trees": {}, '
                                    '"verify_scale": 1.1}]}', '{"key": {}, "val', '[]'])
def test_an_unreadable_cache_file_is_computed_again_with_a_note(tmp_path, capsys, stored):
    """A cached curve that another version of specbench wrote under the same key (an extra field), one cut short,
    or one of another shape is measured again and replaced, with a one-line note: never a traceback. A readable one
    is returned without computing."""
    from specbench.harness.autobudget.trajectories import cached_json

    path = tmp_path / "curves" / "ngram-0.json"
    path.parent.mkdir()
    path.write_text(stored)
    fresh = [{"budget": 4, "tau": 1.7, "draft_ms": 3.0, "trees": {}}]
    parse = lambda value: [BudgetPoint(**point) for point in value]  # noqa: E731
    assert cached_json(path, {"k": 1}, lambda: fresh, parse) == [BudgetPoint(4, 1.7, 3.0)]
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and str(path) in note[0] and "computing it again" in note[0]
    assert json.loads(path.read_text()) == {"key": {"k": 1}, "value": fresh}
    assert not list(path.parent.glob("*.partial"))

    def never():
        raise AssertionError("a readable cache file is not computed again")

    assert cached_json(path, {"k": 1}, never, parse) == [BudgetPoint(4, 1.7, 3.0)] and not capsys.readouterr().err


def test_entries_pin_a_drafter_to_budgets_side_by_side(tiny_run_setup, tmp_path):
    from specbench.results import load_run

    target, _, _ = tiny_run_setup
    from specbench.harness.runner import Run, RunConfig

    config = RunConfig(out=str(tmp_path / "run"), drafters="vanilla,ngram@2,ngram@6", bench="demo", categories=["math"],
                       limit=1, max_new_tokens=12, warmup=False, tree_budget=4,
                       drafter_options={"ngram": {"max_depth": 5}})
    Run(config, progress=False, target=target).execute()
    runs = load_run(tmp_path / "run")
    assert list(runs) == ["vanilla", "ngram@2", "ngram@6"]
    assert {a.tree_budget for a in runs["ngram@2"]} == {2} and {a.tree_budget for a in runs["ngram@6"]} == {6}
    assert all(step.nodes <= 2 for a in runs["ngram@2"] for turn in a.steps for step in turn)
    assert runs["ngram@2"][0].output_ids == runs["vanilla"][0].output_ids == runs["ngram@6"][0].output_ids
    assert parse_budget_spec("auto", ["vanilla@3", "hydra@5", "hydra"]) == {"vanilla@3": 1, "hydra@5": 5, "hydra": AUTO}
    with pytest.raises(SpecbenchError, match="NAME@N"):
        parse_budget_spec("auto", ["hydra@0"])


def test_tau_noise_is_measured_with_the_calibration_questions_as_units():
    """`points_with_noise` reads each budget's overall row as the point and its per-question rows for tau's
    standard error (`metrics.ratio_standard_error` over the questions' tokens and steps), budget by budget."""
    import pandas as pd

    from specbench.harness.autobudget.choose import points_with_noise
    from specbench.metrics import ratio_standard_error

    rows = []
    for budget, per_question in ((1, [(40, 40), (60, 60)]), (4, [(40, 20), (60, 20), (30, 25)])):
        for index, (tokens, steps) in enumerate(per_question):
            rows.append({"budget": budget, "category": f"question {index:04d}", "tokens": tokens, "steps": steps,
                         "tau": tokens / steps, "draft_ms": 1.0, "trees": f"{budget}:{budget - 1}x{steps}"})
        tokens, steps = map(sum, zip(*per_question))
        rows.append({"budget": budget, "category": "overall", "tokens": tokens, "steps": steps, "tau": tokens / steps,
                     "draft_ms": 1.0, "trees": f"{budget}:{budget - 1}x{steps}"})
    one, four = points_with_noise(pd.DataFrame(rows))
    assert (one.budget, one.tau, one.tau_se) == (1, 1.0, 0.0)
    assert four.tau == pytest.approx(130 / 65) and four.tau_se == pytest.approx(ratio_standard_error([40, 60, 30],
                                                                                                    [20, 20, 25]))
    assert four.tau_se > 0 and four.trees == {"4:3": 65}
    assert four.by_question == [{"tokens": 40, "steps": 20, "draft_ms": 1.0, "trees": {"4:3": 20}},
                                {"tokens": 60, "steps": 20, "draft_ms": 1.0, "trees": {"4:3": 20}},
                                {"tokens": 30, "steps": 25, "draft_ms": 1.0, "trees": {"4:3": 25}}]


def test_the_predictions_noise_counts_each_questions_tau_and_trees_together():
    """`predicted_relative_se` on hand numbers: v1 10 ms, o = o' = 0, a profile where 4 nodes cost 1.5x one node.
    Question A emits 30 tokens in 10 steps of 4-node trees (C = 10 x 15 ms = 150), question B 20 tokens in 20 steps
    of the root alone (C = 20 x 10 = 200): S = (10 x 50 / 350), relative SE = ratio_standard_error([30, 20],
    [150, 200]) / (50 / 350). With the trees' costs left out (C_B = 20 x 15 = 300, as if B's steps had proposed
    trees too) the figure differs: A's and B's costs count. The prefill scales it by 1 / (1 + p S)."""
    from specbench.harness.autobudget.predict import BudgetPoint, predicted_relative_se, step_speedup
    from specbench.harness.autobudget.profile import VerifyProfile
    from specbench.metrics import ratio_standard_error

    profile = VerifyProfile(key={"model": "m"}, sizes=[1, 2, 4], ms={"chain": [10.0, 12.5, 15.0],
                                                                     "bushy": [10.0, 12.5, 15.0]})
    by_question = [{"tokens": 30, "steps": 10, "draft_ms": 0.0, "trees": {"4:2": 10}},
                   {"tokens": 20, "steps": 20, "draft_ms": 0.0, "trees": {"1:0": 20}}]
    point = BudgetPoint(4, 50 / 30, 0.0, {"4:2": 10, "1:0": 20}, by_question=by_question)
    expected = ratio_standard_error([30, 20], [150, 200]) / (50 / 350)
    assert step_speedup(point, profile, 0.0, 10.0) == pytest.approx(10 * 50 / 350)
    assert predicted_relative_se(point, profile, 0.0, 10.0) == pytest.approx(expected)
    assert expected != pytest.approx(ratio_standard_error([30, 20], [150, 300]) / (50 / 450))
    step = step_speedup(point, profile, 0.0, 10.0)
    assert predicted_relative_se(point, profile, 0.0, 10.0, prefill_share=0.05) == pytest.approx(
        expected / (1 + 0.05 * step))
    assert predicted_relative_se(BudgetPoint(4, 2.0, 0.0, by_question=by_question[:1]), profile) is None


def test_the_budget_table_shows_the_predictions_noise_and_flags_a_miss_beyond_it():
    """The report's cells: a prediction with its 95% interval from tau's noise, and measured / predicted with the
    miss in combined SEs, marked beyond the noise past 1.96 (and shown plainly where the noise is unknown)."""
    from specbench.reports.tables import miss_cell, predicted_cell

    assert predicted_cell(1.5, 0.05) == "1.50 [1.36, 1.65]"
    assert predicted_cell(1.5, float("nan")) == "1.50"
    assert miss_cell(0.868, -1.7) == "0.868 (-1.7 SE)"
    assert miss_cell(0.80, -2.4) == "0.800 (-2.4 SE, **beyond question noise**)"
    assert miss_cell(1.25, 2.1) == "1.250 (+2.1 SE, **beyond question noise**)"
    assert miss_cell(0.95, float("nan")) == "0.950"
