"""`--batch-size` on `run` (issue 43, item 1's command-line part and item 4): a sweep writes batch 1 where a run
always wrote and each B > 1 into ``batch-B/``; every sequence's ids at batch B equal batch 1's; the summary has a
block of rows per batch size with throughput over the batch passes; resume skips finished work at each size; bad
sizes are one-line errors with exit code 2 (docs/decisions.md, "Batching")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specbench import metrics
from specbench.errors import SpecbenchError
from specbench.harness.config import RunConfig
from test_cli import assert_one_line_error, cli_in_process

QUESTIONS = [  # ragged prompts, two turns each (one question with one turn: a pass without it)
    {"question_id": 1, "category": "math", "turns": ["What is seven times six?", "And divided by three?"]},
    {"question_id": 2, "category": "math", "turns": ["Add 12 and 30, then explain each step in a few words.",
                                                     "Now subtract 2."]},
    {"question_id": 3, "category": "writing", "turns": ["Write a line about rain.", "Make it rhyme."]},
    {"question_id": 4, "category": "writing", "turns": ["Name a colour."]},
]


@pytest.fixture()
def tiny_setup(tmp_path, monkeypatch):
    """A tiny fp32 Llama with a character tokenizer, and a four-question file."""
    from conftest import build_tiny_model
    from specbench.model import TargetModel
    from test_export import char_bpe_tokenizer

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    bench = tmp_path / "question.jsonl"
    bench.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    target = TargetModel(build_tiny_model("llama"), char_bpe_tokenizer(tmp_path / "tok"))
    return target, bench


def run_sweep(target, bench, out, **options):
    from specbench.harness.runner import Run

    settings = dict(drafters=["vanilla", "ngram"], bench=str(bench), max_new_tokens=12, tree_budget=4, warmup=False,
                    batch_size=[1, 2]) | options
    return Run(RunConfig(out=str(out), **settings), progress=False, target=target).execute()


def by_id(records) -> dict:
    return {record.question_id: record for record in records}


def test_sweep_ids_equal_batch_1_and_summary_has_a_block_per_size(tiny_setup, tmp_path):
    from specbench.reports.summary import COLUMNS, write_summary
    from specbench.results import load_run

    target, bench = tiny_setup
    out = tmp_path / "run"
    run_sweep(target, bench, out)
    assert (out / "answers" / "ngram.jsonl").is_file() and (out / "batch-2" / "answers" / "ngram.jsonl").is_file()
    assert not (out / "batch-1").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["batch_size"] == [1, 2]

    one, two = load_run(out), load_run(out / "batch-2")
    assert list(one) == list(two) == ["vanilla", "ngram"]
    for name in ("vanilla", "ngram"):
        first, second = by_id(one[name]), by_id(two[name])
        assert set(first) == set(second) == {q["question_id"] for q in QUESTIONS}
        for qid, record in second.items():
            assert record.output_ids == first[qid].output_ids, (name, qid)  # every question, every turn
            assert len(record.output_ids) == len(next(q for q in QUESTIONS if q["question_id"] == qid)["turns"])
            assert record.extra["batch_size"] == 2 and first[qid].extra["batch_size"] == 1
            passes = record.extra["batch_passes"]
            assert [p["turn"] for p in passes] == list(range(1, len(record.turns) + 1))
            assert all(p["batch_size"] == 2 and p["wall_s"] > 0 for p in passes)
            assert record.equal_to_vanilla  # compared with vanilla at batch 2
        turn_1 = {p["id"]: p for r in second.values() for p in r.extra["batch_passes"] if p["turn"] == 1}
        assert len(turn_1) == 1  # one pass per turn for the drafter: all four questions' turn 1
        (pass_1,) = turn_1.values()
        assert pass_1["sequences"] == 4 and pass_1["new_tokens"] == sum(r.new_tokens[0] for r in second.values())

    summary = write_summary(out)
    assert list(summary.columns) == COLUMNS
    overall = summary[summary["category"] == "overall"].set_index(["drafter", "batch_size"])
    assert sorted(overall.index) == [("ngram", 1), ("ngram", 2), ("vanilla", 1), ("vanilla", 2)]
    for key in overall.index:
        row = overall.loc[key]
        assert row["throughput_tok_s"] > 0 and row["ms_per_token_p95"] >= row["ms_per_token_p50"] > 0
        assert row["equal_to_vanilla"] == 1.0
    assert overall.loc[("vanilla", 1), "throughput_speedup"] == pytest.approx(1.0)
    assert overall.loc[("vanilla", 2), "throughput_speedup"] == pytest.approx(1.0)
    # batch 1: throughput is the turns' own tokens over their wall time, as tokens_per_s always was
    assert overall.loc[("ngram", 1), "throughput_tok_s"] == pytest.approx(overall.loc[("ngram", 1), "tokens_per_s"])
    # batch 2: over the passes' measured wall time, and against vanilla at batch 2
    passes = [p for r in two["ngram"] for p in r.extra["batch_passes"]]
    assert overall.loc[("ngram", 2), "throughput_tok_s"] == pytest.approx(metrics.pass_throughput(passes))
    assert overall.loc[("ngram", 2), "throughput_speedup"] == pytest.approx(
        overall.loc[("ngram", 2), "throughput_tok_s"] / overall.loc[("vanilla", 2), "throughput_tok_s"])
    categories = summary[(summary["category"] == "math") & (summary["batch_size"] == 2)]
    assert categories["throughput_tok_s"].isna().all()  # a pass mixes categories: overall rows only
    csv_rows = (out / "summary.csv").read_text().splitlines()
    assert csv_rows[0].split(",") == COLUMNS and len(csv_rows) == 1 + len(summary)


def test_the_report_shows_the_sweep(tiny_setup, tmp_path):
    """`specbench report` of a sweep: the batch-size table (one row per drafter and size, throughput over
    vanilla's at the same size) and the batch_scaling chart; every answer records its regime."""
    from specbench.reports.report import build_report
    from specbench.reports.runs import load_runs
    from specbench.reports.summary import summarize_run
    from specbench.results import load_run

    target, bench = tiny_setup
    out = tmp_path / "run"
    run_sweep(target, bench, out)
    assert {r.extra["regime"] for records in load_run(out / "batch-2").values() for r in records} == {"eager"}
    (section,) = build_report(load_runs([out])).sections[1:]
    table = next(t for t in section.tables if t.name == "batch_sizes")
    assert list(zip(table.data["drafter"], table.data["batch_size"])) == [
        ("vanilla", 1), ("ngram", 1), ("vanilla", 2), ("ngram", 2)]
    overall = summarize_run(out).query("category == 'overall'")
    assert list(table.data["throughput_speedup"]) == pytest.approx(list(overall["throughput_speedup"]))
    assert any(chart.name == "batch_scaling" for chart in section.charts)
    assert "Batch 2: 4 questions, fewer than 4 per row" in table.note  # 4 questions cannot keep 2 rows refilled


def test_a_batch_size_with_enough_questions_is_not_called_drained():
    import pandas as pd

    from specbench.reports.tables import drained_batches

    data = pd.DataFrame({"batch_size": [1, 2, 2, 4], "n_questions": [8, 8, 8, 8]})
    assert drained_batches(data) == [
        "Batch 4: 8 questions, fewer than 4 per row: the batch drains as rows end, so its throughput follows the "
        "slowest rows (use --limit or a larger question file for at least 16)."]


def test_resume_skips_finished_work_at_each_batch_size(tiny_setup, tmp_path):
    from specbench.results import load_run

    target, bench = tiny_setup
    out = tmp_path / "run"
    run_sweep(target, bench, out)
    before = {path: path.read_text() for path in out.glob("**/answers/*.jsonl")}
    # interrupted: ngram's last question at batch 2 is gone, and its last-but-one line is cut short
    cut = out / "batch-2" / "answers" / "ngram.jsonl"
    lines = before[cut].splitlines(keepends=True)
    cut.write_text("".join(lines[:-2]) + lines[-2][:40])
    run_sweep(target, bench, out, resume=True)
    for path, text in before.items():
        if path != cut:
            assert path.read_text() == text, path  # finished work untouched, at batch 1 and at batch 2
    resumed = by_id(load_run(out / "batch-2")["ngram"])
    assert set(resumed) == {q["question_id"] for q in QUESTIONS}
    reference = by_id(load_run(out)["ngram"])
    assert all(resumed[qid].output_ids == reference[qid].output_ids for qid in resumed)
    kept = [json.loads(line)["question_id"] for line in lines[:-2]]
    assert [r.question_id for r in load_run(out / "batch-2")["ngram"]][: len(kept)] == kept

    # a resume that adds a size runs only that size, and the manifest records every size run
    run_sweep(target, bench, out, resume=True, batch_size=[1, 3])
    assert len(load_run(out / "batch-3")["vanilla"]) == len(QUESTIONS)
    assert json.loads((out / "manifest.json").read_text())["config"]["batch_size"] == [1, 2, 3]


def test_a_compressed_run_resumes_without_rerunning_and_refuses_a_plain_rerun(tiny_setup, tmp_path):
    """Committed runs keep their answers gzip-compressed; `--resume` adding a batch size continues them (the
    compressed files reopened as plain text, nothing rerun), and a run without `--resume` refuses the folder."""
    import gzip

    from specbench.results import load_run

    target, bench = tiny_setup
    out = tmp_path / "run"
    run_sweep(target, bench, out)
    before = {path: path.read_text() for path in out.glob("**/answers/*.jsonl")}
    for path, text in before.items():
        with gzip.open(path.with_suffix(".jsonl.gz"), "wt", encoding="utf-8") as handle:
            handle.write(text)
        path.unlink()
    with pytest.raises(SpecbenchError, match="already holds results"):
        run_sweep(target, bench, out)
    run_sweep(target, bench, out, resume=True, batch_size=[1, 2, 3])
    assert not list(out.glob("**/answers/*.gz"))
    for path, text in before.items():
        assert path.read_text() == text, path  # reopened, no question rerun or appended twice
    assert len(load_run(out / "batch-3")["vanilla"]) == len(QUESTIONS)


def test_batch_sizes_only_above_1_write_no_top_level_answers(tiny_setup, tmp_path):
    from specbench.reports.summary import write_summary

    target, bench = tiny_setup
    out = tmp_path / "run"
    run_sweep(target, bench, out, batch_size=2)  # the API's one int
    assert not (out / "answers").exists() and (out / "batch-2" / "answers" / "vanilla.jsonl").is_file()
    summary = write_summary(out)
    assert set(summary["batch_size"]) == {2}
    assert_one_line_error(cli_in_process("report", str(out), "--out", str(tmp_path / "report")), "ran batch sizes 2 only")
    from specbench.reports.runs import load_results

    assert load_results(out / "batch-2").answers  # the sub-run reports on its own, as the error says


@pytest.mark.parametrize("given, sizes", [("4,1,4", [1, 4]), ("2", [2]), (3, [3]), ([2, 1], [1, 2])])
def test_batch_size_values(given, sizes):
    assert RunConfig(out="x", drafters=["vanilla"], batch_size=given).batch_sizes == sizes


@pytest.mark.parametrize("given, fragment", [("0", "--batch-size must be at least 1"), (0, "--batch-size must be "),
                                             ("x", "--batch-size: expected comma-separated integers"),
                                             ("1,0", "--batch-size must be at least 1")])
def test_bad_batch_size_in_the_api(given, fragment):
    with pytest.raises(SpecbenchError, match=fragment):
        RunConfig(out="x", drafters=["vanilla"], batch_size=given)


def test_drafter_that_cannot_batch_and_repeats_are_refused_before_loading(monkeypatch):
    from specbench import Drafter, registry
    from specbench.registry import register_drafter

    monkeypatch.setattr(registry, "_decorated", dict(registry._decorated))  # the test's drafter leaves with it

    @register_drafter("test-one-row")
    class OneRow(Drafter):  # a plug-in that cannot follow its batch row says so
        max_batch_size = 1

    config = RunConfig(out="x", drafters=["vanilla", "test-one-row"], batch_size="1,2")
    with pytest.raises(SpecbenchError, match="drafter test-one-row runs at batch size 1 at most"):
        config.check(model_given=True)
    RunConfig(out="x", drafters=["vanilla", "test-one-row"], batch_size="1").check(model_given=True)  # batch 1: fine
    RunConfig(out="x", drafters=["vanilla", "eagle3"], batch_size="1,2").check(model_given=True)  # every built-in batches
    with pytest.raises(SpecbenchError, match="--repeats 3 works at batch size 1 only"):
        RunConfig(out="x", drafters=["vanilla"], batch_size="2", repeats=3).check(model_given=True)


@pytest.mark.parametrize("args, fragment", [
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--batch-size", "x"], "--batch-size: expected comma-separated integers, got 'x'"),
])
def test_bad_batch_size_on_the_command_line_is_one_line_exit_2(args, fragment, tmp_path):
    result = cli_in_process("run", *args, "--out", str(tmp_path / "o"))
    assert_one_line_error(result, fragment)
    assert not (tmp_path / "o" / "answers").exists()


def test_pass_throughput_counts_each_pass_once():
    a = {"id": "a", "new_tokens": 30, "wall_s": 1.0}
    b = {"id": "b", "new_tokens": 10, "wall_s": 1.0}
    assert metrics.pass_throughput([a, a, b, a]) == pytest.approx(20.0)
    assert np.isnan(metrics.pass_throughput([]))
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5) and np.isnan(metrics.percentile([], 95))


def test_the_api_takes_a_sweep_and_reads_it_back(tiny_setup, tmp_path):
    import specbench

    target, bench = tiny_setup
    result = specbench.run(model=target, drafters="vanilla,ngram", bench=str(bench), max_new_tokens=6, tree_budget=4,
                           warmup=False, batch_size="1,2", out=str(tmp_path / "api"))
    assert list(result.batches) == [2] and list(result.answers) == ["vanilla", "ngram"]
    assert sorted(set(result.summary["batch_size"])) == [1, 2]
    assert specbench.load(tmp_path / "api").summary.equals(result.summary)
