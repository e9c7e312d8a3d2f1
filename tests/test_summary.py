"""``summary.csv`` from a synthetic run directory written here, in the exact record format of
`specbench.harness.runner.Run._run_question`, against numbers computed by hand; malformed answer files;
``specbench report``; `results.read_answers` dropping a half-written tail; `results.first_divergence`.

The synthetic run: drafters vanilla and ngram; categories "writing" (questions 81, 82) and "math"
(111, 112), written in that order (not alphabetical); two turns per question. Every ngram turn equals
vanilla's ids except question 112 turn 2, which differs from index 2 on.

Hand-computed totals (wall in s, prefill in ms, stage ms summed over steps):

=========  =========  =====  ======  ====  =======  =====  ======================================
drafter    category   tok    wall    steps prefill  decode  stages (draft/transform/verify/accept)
=========  =========  =====  ======  ====  =======  =====  ======================================
vanilla    writing    20     2.0     16    80       1920   16 / 0 / 800 / 80
vanilla    math       18     1.8     14    60       1740   14 / 0 / 700 / 70
vanilla    overall    38     3.8     30    140      3660   30 / 0 / 1500 / 150
ngram      writing    20     1.0     7     84       916    14 / 3.5 / 420 / 42
ngram      math       18     1.15    7     60       1090   14 / 3.5 / 420 / 42
ngram      overall    38     2.15    14    144      2006   28 / 7 / 840 / 84
=========  =========  =====  ======  ====  =======  =====  ======================================

(vanilla steps cost draft 1, verify 50, accept 5 ms and record no transform; ngram steps cost draft 2,
transform 0.5, verify 60, accept 6 ms.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from specbench import metrics
from specbench.errors import SpecbenchError
from specbench.harness.cli import main
from specbench.reports.summary import COLUMNS, summarize, write_summary
from specbench.results import SUMMARY, first_divergence, load_run, read_answers

VANILLA_STAGES = {"draft": 1.0, "verify": 50.0, "accept": 5.0}
NGRAM_STAGES = {"draft": 2.0, "transform": 0.5, "verify": 60.0, "accept": 6.0}

# (question_id, category) in file order
QUESTIONS = [(81, "writing"), (82, "writing"), (111, "math"), (112, "math")]

# per drafter, per question: per turn (accept lengths, wall s, prefill ms)
#   new_tokens of a turn = 1 + sum(accept lengths) (the root chosen at prefill is the first new token)
TURNS = {
    "vanilla": {
        81: [([1] * 4, 0.5, 20.0), ([1] * 3, 0.4, 10.0)],  # 5 + 4 tokens
        82: [([1] * 5, 0.6, 30.0), ([1] * 4, 0.5, 20.0)],  # 6 + 5
        111: [([1] * 3, 0.4, 10.0), ([1] * 2, 0.3, 10.0)],  # 4 + 3
        112: [([1] * 4, 0.5, 20.0), ([1] * 5, 0.6, 20.0)],  # 5 + 6
    },
    "ngram": {
        81: [([3, 1], 0.25, 22.0), ([2, 1], 0.2, 12.0)],  # 5 + 4
        82: [([5], 0.3, 30.0), ([2, 2], 0.25, 20.0)],  # 6 + 5
        111: [([1, 2], 0.4, 10.0), ([2], 0.2, 10.0)],  # 4 + 3
        112: [([2, 2], 0.25, 20.0), ([3, 2], 0.3, 20.0)],  # 5 + 6 (turn 2 diverges at index 2)
    },
}
DIVERGING = (112, 1, 2)  # question, turn index, first differing token index


def vanilla_ids(qid: int, turn: int, n: int) -> list[int]:
    return [(qid * 7 + turn * 13 + i * 3) % 97 for i in range(n)]


def make_record(drafter: str, qid: int, category: str, breakdown: bool = True) -> dict:
    """One answer line, key for key as `Run._run_question` writes it."""
    turns = TURNS[drafter][qid]
    stage = VANILLA_STAGES if drafter == "vanilla" else NGRAM_STAGES
    output_ids, steps, divergence = [], [], []
    for t, (lengths, _, _) in enumerate(turns):
        ids = vanilla_ids(qid, t, 1 + sum(lengths))
        reference = list(ids)
        if drafter != "vanilla" and (qid, t) == DIVERGING[:2]:
            cut = DIVERGING[2]
            ids = ids[:cut] + [(token + 1) % 97 for token in ids[cut:]]
        output_ids.append(ids)
        divergence.append(None if drafter == "vanilla" else first_divergence(ids, reference))
        if drafter == "vanilla":
            steps.append([{"nodes": 1, "depth": 0, "accepted": 1, "stage_ms": dict(stage) if breakdown else None}
                          for _ in lengths])
        else:
            steps.append([{"nodes": 10, "depth": 5, "accepted": a, "stage_ms": dict(stage) if breakdown else None}
                          for a in lengths])
    return {
        "question_id": qid,
        "category": category,
        "answer_id": f"{drafter}-{qid}",
        "model_id": "tiny-test-model",
        "tstamp": 1700000000.0 + qid,
        "drafter": drafter,
        "choices": [{
            "index": 0,
            "turns": [f"answer {qid}.{t}" for t in range(len(turns))],
            "new_tokens": [1 + sum(lengths) for lengths, _, _ in turns],
            "wall_time": [wall for _, wall, _ in turns],
            "decoding_steps": [len(lengths) for lengths, _, _ in turns],
            "accept_lengths": [a for lengths, _, _ in turns for a in lengths],
            "output_ids": output_ids,
            "steps": steps,
            "prefill_ms": [prefill if breakdown else None for _, _, prefill in turns],
            "wall_time_repeats": [[wall] for _, wall, _ in turns],
        }],
        "equal_to_vanilla": all(d is None for d in divergence),
        "first_divergence": divergence,
    }


def write_run(folder: Path, breakdown: bool = True) -> Path:
    answers = folder / "answers"
    answers.mkdir(parents=True)
    for drafter in ("vanilla", "ngram"):
        with open(answers / f"{drafter}.jsonl", "w", encoding="utf-8") as handle:
            for qid, category in QUESTIONS:
                handle.write(json.dumps(make_record(drafter, qid, category, breakdown), separators=(",", ":")) + "\n")
    return folder


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return write_run(tmp_path / "run")


@pytest.fixture
def summary_csv(run_dir) -> pd.DataFrame:
    returned = write_summary(run_dir)
    table = pd.read_csv(run_dir / SUMMARY)
    assert list(returned.columns) == list(table.columns)
    return table


def row(table: pd.DataFrame, drafter: str, category: str) -> pd.Series:
    rows = table[(table["drafter"] == drafter) & (table["category"] == category)]
    assert len(rows) == 1
    return rows.iloc[0]


def close(value: float, expected: float) -> bool:
    """The CSV keeps 6 significant digits (%.6g)."""
    return value == pytest.approx(expected, rel=1e-5, abs=1e-9)


# ---- the fixture itself follows the runner's invariants ---------------------------------------------------
def test_fixture_records_are_consistent(run_dir):
    runs = load_run(run_dir)
    assert list(runs) == ["vanilla", "ngram"]  # the run order: vanilla first
    for records in runs.values():
        for record in records:
            choice = record.to_json()["choices"][0]
            flat = []
            for t, ids in enumerate(choice["output_ids"]):
                lengths = [step["accepted"] for step in choice["steps"][t]]
                assert 1 + sum(lengths) == choice["new_tokens"][t] == len(ids)
                assert choice["decoding_steps"][t] == len(lengths)
                flat += lengths
            assert flat == choice["accept_lengths"]
    ngram = {r.question_id: r for r in runs["ngram"]}
    assert ngram[112].first_divergence == [None, 2] and ngram[112].equal_to_vanilla is False
    assert all(ngram[q].equal_to_vanilla for q in (81, 82, 111))


# ---- summary.csv -------------------------------------------------------------------------------------------
def test_summary_columns_and_row_order(summary_csv):
    assert list(summary_csv.columns) == COLUMNS
    assert list(zip(summary_csv["drafter"], summary_csv["category"])) == [
        ("vanilla", "writing"), ("vanilla", "math"), ("vanilla", "overall"),
        ("ngram", "writing"), ("ngram", "math"), ("ngram", "overall"),
    ]


@pytest.mark.parametrize(
    "drafter, category, n_questions, new_tokens, wall_s, tau",
    [
        ("vanilla", "writing", 2, 20, 2.0, 1.0),
        ("vanilla", "math", 2, 18, 1.8, 1.0),
        ("vanilla", "overall", 4, 38, 3.8, 1.0),
        # ngram writing accept lengths 3,1,2,1,5,2,2 -> 16/7; math 1,2,2,2,2,3,2 -> 14/7; overall 30/14
        ("ngram", "writing", 2, 20, 1.0, 16 / 7),
        ("ngram", "math", 2, 18, 1.15, 2.0),
        ("ngram", "overall", 4, 38, 2.15, 30 / 14),
    ],
)
def test_summary_counts_throughput_and_tau(summary_csv, drafter, category, n_questions, new_tokens, wall_s, tau):
    r = row(summary_csv, drafter, category)
    assert r["n_questions"] == n_questions
    assert r["new_tokens"] == new_tokens
    assert close(r["wall_s"], wall_s)
    assert close(r["tokens_per_s"], new_tokens / wall_s)
    assert close(r["tau"], tau)


@pytest.mark.parametrize(
    "category, speedup, mean_throughput",
    [
        # base is 0.1 s/token everywhere; ngram writing 1.0 s / 20 tok = 0.05 -> 2.0
        # per-question throughputs: vanilla 10 tok/s each; ngram q81 9/0.45 = 20, q82 11/0.55 = 20
        ("writing", 2.0, 2.0),
        # ngram math 1.15 s / 18 tok -> 0.1 * 18 / 1.15 = 1.8 / 1.15; throughputs q111 7/0.6, q112 11/0.55 = 20
        ("math", 1.8 / 1.15, (7 / 0.6 + 20.0) / 2 / 10),
        # overall 3.8 s / 38 tok vs 2.15 s / 38 tok
        ("overall", 3.8 / 2.15, (20.0 + 20.0 + 7 / 0.6 + 20.0) / 4 / 10),
    ],
)
def test_summary_speedups(summary_csv, category, speedup, mean_throughput):
    r = row(summary_csv, "ngram", category)
    assert close(r["speedup"], speedup)
    assert close(r["speedup_mean_throughput"], mean_throughput)
    assert r["speedup_ci_low"] <= r["speedup"] <= r["speedup_ci_high"]
    # every question's ratio lies in [7/6 (q111: 0.1 / (0.6 / 7)), 2.0], and so does every resample's
    assert 7 / 6 - 1e-6 <= r["speedup_ci_low"] and r["speedup_ci_high"] <= 2.0 + 1e-6


def test_summary_ci_hand_computed(summary_csv):
    # writing: both questions have ratio exactly 2 -> the interval is [2, 2]
    writing = row(summary_csv, "ngram", "writing")
    assert close(writing["speedup_ci_low"], 2.0) and close(writing["speedup_ci_high"], 2.0)
    # math, two questions with ratios 7/6 and 2: a quarter of the resamples are each one alone, so the
    # 2.5% / 97.5% quantiles are exactly those ratios
    math_row = row(summary_csv, "ngram", "math")
    assert close(math_row["speedup_ci_low"], 7 / 6) and close(math_row["speedup_ci_high"], 2.0)
    # overall: the paired bootstrap (2000 resamples, seed 0) over the four questions in file order
    base_t, base_n = [0.9, 1.1, 0.7, 1.1], [9, 11, 7, 11]
    meth_t, meth_n = [0.45, 0.55, 0.6, 0.55], [9, 11, 7, 11]
    low, high = metrics.bootstrap_speedup_ci(base_t, base_n, meth_t, meth_n)
    overall = row(summary_csv, "ngram", "overall")
    assert close(overall["speedup_ci_low"], low) and close(overall["speedup_ci_high"], high)
    assert low < high


def test_vanilla_against_itself(summary_csv):
    for category in ("writing", "math", "overall"):
        r = row(summary_csv, "vanilla", category)
        for column in ("speedup", "speedup_ci_low", "speedup_ci_high", "speedup_mean_throughput", "equal_to_vanilla"):
            assert close(r[column], 1.0), column


@pytest.mark.parametrize("category, equal", [("writing", 1.0), ("math", 3 / 4), ("overall", 7 / 8)])
def test_summary_equal_to_vanilla_is_a_fraction_of_turns(summary_csv, category, equal):
    assert close(row(summary_csv, "ngram", category)["equal_to_vanilla"], equal)


@pytest.mark.parametrize(
    "drafter, category, prefill_mean, decode_ms, stages",
    [
        ("vanilla", "writing", 80 / 4, 1920.0, (16.0, 0.0, 800.0, 80.0)),
        ("vanilla", "math", 60 / 4, 1740.0, (14.0, 0.0, 700.0, 70.0)),
        ("vanilla", "overall", 140 / 8, 3660.0, (30.0, 0.0, 1500.0, 150.0)),
        ("ngram", "writing", 84 / 4, 916.0, (14.0, 3.5, 420.0, 42.0)),
        ("ngram", "math", 60 / 4, 1090.0, (14.0, 3.5, 420.0, 42.0)),
        ("ngram", "overall", 144 / 8, 2006.0, (28.0, 7.0, 840.0, 84.0)),
    ],
)
def test_summary_prefill_and_stage_shares(summary_csv, drafter, category, prefill_mean, decode_ms, stages):
    r = row(summary_csv, drafter, category)
    assert close(r["prefill_ms"], prefill_mean)
    names = ("draft_share", "transform_share", "verify_share", "accept_share")
    for name, ms in zip(names, stages):
        assert close(r[name], ms / decode_ms), name
    assert close(r["other_share"], 1.0 - sum(stages) / decode_ms)
    assert sum(r[name] for name in names) + r["other_share"] == pytest.approx(1.0, abs=1e-5)


def test_summary_without_breakdown_has_empty_timing_columns(tmp_path):
    folder = write_run(tmp_path / "run", breakdown=False)
    write_summary(folder)
    table = pd.read_csv(folder / SUMMARY)
    timing = ["prefill_ms", "draft_share", "transform_share", "verify_share", "accept_share", "other_share"]
    assert table[timing].isna().all().all()
    # everything else is still there
    assert close(row(table, "ngram", "overall")["speedup"], 3.8 / 2.15)
    assert close(row(table, "ngram", "math")["equal_to_vanilla"], 3 / 4)
    assert close(row(table, "ngram", "writing")["tau"], 16 / 7)
    raw = (folder / SUMMARY).read_text().splitlines()
    assert raw[0].split(",") == COLUMNS


def test_one_untimed_step_blanks_its_category_and_overall(tmp_path):
    folder = write_run(tmp_path / "run")
    path = folder / "answers" / "ngram.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[2]["choices"][0]["steps"][0][0]["stage_ms"] = None  # question 111 (math)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    table = summarize(load_run(folder))
    assert not math.isnan(row(table, "ngram", "writing")["verify_share"])
    for category in ("math", "overall"):
        r = row(table, "ngram", category)
        assert math.isnan(r["verify_share"]) and math.isnan(r["other_share"]) and math.isnan(r["prefill_ms"])
    assert not math.isnan(row(table, "vanilla", "math")["other_share"])


def test_summary_without_vanilla_has_no_speedup(tmp_path):
    folder = write_run(tmp_path / "run")
    (folder / "answers" / "vanilla.jsonl").unlink()
    table = summarize(load_run(folder))
    assert list(table["drafter"]) == ["ngram"] * 3
    assert table["speedup"].isna().all() and table["speedup_ci_low"].isna().all()
    assert close(row(table, "ngram", "overall")["tokens_per_s"], 38 / 2.15)


# ---- malformed input ---------------------------------------------------------------------------------------
def good_lines(drafter: str = "ngram") -> list[str]:
    return [json.dumps(make_record(drafter, qid, category)) for qid, category in QUESTIONS]


def test_truncated_json_line_names_file_and_line(run_dir):
    path = run_dir / "answers" / "ngram.jsonl"
    lines = good_lines()
    lines[1] = lines[1][: len(lines[1]) // 2]  # cut mid-record
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecbenchError, match=rf"{path.name}:2: malformed answer record"):
        read_answers(path)
    with pytest.raises(SpecbenchError, match=r"ngram\.jsonl:2:"):
        write_summary(run_dir)


def test_invalid_json_line_names_file_and_line(run_dir):
    path = run_dir / "answers" / "vanilla.jsonl"
    lines = good_lines("vanilla")
    lines.insert(3, "not json at all")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecbenchError) as info:
        read_answers(path)
    assert str(info.value).startswith(f"{path}:4: ")


def test_record_missing_choices_names_file_and_line(run_dir):
    path = run_dir / "answers" / "ngram.jsonl"
    lines = good_lines()
    record = json.loads(lines[2])
    del record["choices"]
    lines[2] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecbenchError) as info:
        load_run(run_dir)
    message = str(info.value)
    assert message.startswith(f"{path}:3: malformed answer record")
    assert "choices" in message


def test_record_missing_a_choice_key_names_the_key(run_dir):
    path = run_dir / "answers" / "ngram.jsonl"
    lines = good_lines()
    record = json.loads(lines[0])
    del record["choices"][0]["steps"]
    lines[0] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecbenchError, match=r"ngram\.jsonl:1: .*steps"):
        read_answers(path)


def test_blank_lines_are_skipped_but_counted(run_dir):
    path = run_dir / "answers" / "ngram.jsonl"
    lines = good_lines()
    path.write_text(lines[0] + "\n\n" + "{broken\n")
    with pytest.raises(SpecbenchError, match=r"ngram\.jsonl:3: "):
        read_answers(path)


def test_run_dir_without_answers_folder(tmp_path):
    with pytest.raises(SpecbenchError, match="answers/"):
        load_run(tmp_path)
    with pytest.raises(SpecbenchError):
        write_summary(tmp_path)
    assert not (tmp_path / SUMMARY).exists()


def test_run_dir_with_empty_answers_folder(tmp_path):
    (tmp_path / "answers").mkdir()
    with pytest.raises(SpecbenchError, match="no answer files"):
        write_summary(tmp_path)


# ---- specbench report ---------------------------------------------------------------------------------------
def test_report_command_writes_summary_under_its_out_only(run_dir, capsys):
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"== {run_dir}" in out and "ngram" in out and "overall" in out
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and "report" not in p.parts} == before
    assert not (run_dir / SUMMARY).exists()  # the run is only read; the default --out is RUN/report
    table = pd.read_csv(run_dir / "report" / SUMMARY)
    assert list(table.columns) == COLUMNS and len(table) == 6
    assert close(row(table, "ngram", "overall")["speedup"], 3.8 / 2.15)


def test_report_command_on_malformed_file_exits_2(run_dir, capsys):
    path = run_dir / "answers" / "ngram.jsonl"
    lines = good_lines()
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40] + "\n")
    assert main(["report", str(run_dir)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1
    assert err[0].startswith("specbench: error: ")
    assert f"{path}:4:" in err[0]
    assert not (run_dir / SUMMARY).exists()


def test_report_command_on_a_non_run_directory_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("specbench: error: ")


# ---- read_answers(drop_partial_tail) and first_divergence ---------------------------------------------------
def test_drop_partial_tail_removes_an_unterminated_last_line(tmp_path):
    path = tmp_path / "ngram.jsonl"
    lines = good_lines()
    complete = lines[0] + "\n" + lines[1] + "\n"
    path.write_text(complete + lines[2][:30])  # a write cut short by a kill
    with pytest.raises(SpecbenchError, match=r":3: "):
        read_answers(path)  # without the flag the half line is an error
    records = read_answers(path, drop_partial_tail=True)
    assert [r.question_id for r in records] == [81, 82]
    assert path.read_text() == complete  # the half line is gone from the file, the rest untouched
    assert read_answers(path) == records


def test_drop_partial_tail_drops_even_a_parseable_unterminated_line(tmp_path):
    path = tmp_path / "ngram.jsonl"
    lines = good_lines()
    path.write_text(lines[0] + "\n" + lines[1])
    assert [r.question_id for r in read_answers(path, drop_partial_tail=True)] == [81]
    assert path.read_text() == lines[0] + "\n"


def test_drop_partial_tail_keeps_a_complete_file(tmp_path):
    path = tmp_path / "ngram.jsonl"
    text = "\n".join(good_lines()) + "\n"
    path.write_text(text)
    assert len(read_answers(path, drop_partial_tail=True)) == 4
    assert path.read_text() == text


def test_drop_partial_tail_of_a_single_half_line_leaves_an_empty_file(tmp_path):
    path = tmp_path / "ngram.jsonl"
    path.write_text('{"question_id": 8')
    assert read_answers(path, drop_partial_tail=True) == []
    assert path.read_text() == ""


@pytest.mark.parametrize(
    "ids, reference, expected",
    [
        ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], None),  # equal
        ([1, 2, 3, 9, 5], [1, 2, 3, 4, 5], 3),  # differ at 3
        ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6], 5),  # a prefix, shorter: diverges where it stops
        ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5], 5),  # longer than the reference
        ([7, 2], [1, 2], 0),
        ([], [], None),
        ([], [4], 0),
    ],
)
def test_first_divergence(ids, reference, expected):
    assert first_divergence(ids, reference) == expected
