"""Equality with vanilla comes from the output ids (issue 40 item 3): the summary and the report compute it
from each drafter's ``output_ids`` against vanilla's for the same question and turn, and an answer file whose
recorded claims (``first_divergence``, ``equal_to_vanilla``) disagree with its ids is refused with one line
naming the file, question and turn (`specbench.results.check_claims`, `Answer.from_json`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from specbench.errors import SpecbenchError
from specbench.harness.cli import main
from specbench.reports.summary import summarize
from specbench.results import Answer, load_run, read_answers
from test_summary import DIVERGING, write_run  # vanilla and ngram; ngram's question 112 turn 2 differs at token 2

OVERALL = ("ngram", "overall")


@pytest.fixture
def run(tmp_path) -> Path:
    return write_run(tmp_path / "run")


def _edit(run: Path, drafter: str, qid: int, change) -> None:
    path = run / "answers" / f"{drafter}.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        if record["question_id"] == qid:
            change(record)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _refused(run: Path, capsys, tmp_path) -> str:
    assert main(["report", str(run), "--out", str(tmp_path / "report"), "--charts", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("specbench: error: ")
    return err


# ---- equality is computed from the ids ---------------------------------------------------------------------
def test_the_summary_ignores_the_recorded_claims(run):
    runs = load_run(run)
    truth = summarize(runs).set_index(["drafter", "category"]).loc[OVERALL, "equal_to_vanilla"]
    assert truth == pytest.approx(7 / 8)
    for record in runs["ngram"]:  # in memory, every claim says "equal": the summary still counts the ids
        record.first_divergence = [None] * len(record.turns)
    assert summarize(runs).set_index(["drafter", "category"]).loc[OVERALL, "equal_to_vanilla"] == pytest.approx(7 / 8)
    for record in runs["ngram"]:  # no claim at all (a record from before they existed): still from the ids
        record.first_divergence = None
    row = summarize(runs).set_index(["drafter", "category"]).loc[OVERALL]
    assert row["equal_to_vanilla"] == pytest.approx(7 / 8) and (row["equal_turns"], row["turns"]) == (7, 8)
    assert row["unattributed_turns"] == 1  # the differing turn, not re-scored


def test_changing_the_ids_changes_the_summary(run):
    qid, turn, _ = DIVERGING
    vanilla = {r.question_id: r for r in read_answers(run / "answers" / "vanilla.jsonl")}
    # make ngram's diverging turn equal to vanilla's, and say so consistently: now every turn is equal
    _edit(run, "ngram", qid, lambda r: (r["choices"][0]["output_ids"].__setitem__(turn, vanilla[qid].output_ids[turn]),
                                              r.__setitem__("first_divergence", [None, None]),
                                              r.__setitem__("equal_to_vanilla", True)))
    row = summarize(load_run(run)).set_index(["drafter", "category"]).loc[OVERALL]
    assert row["equal_to_vanilla"] == 1.0 and row["equal_turns"] == 8


def test_a_sampled_run_compares_nothing(run):
    runs = load_run(run)
    for records in runs.values():
        for record in records:
            record.sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "verify": "rejection", "lossless": True}
            record.first_divergence = None
    row = summarize(runs).set_index(["drafter", "category"]).loc[OVERALL]
    assert pd.isna(row["equal_to_vanilla"]) and pd.isna(row["equal_turns"]) and row["turns"] == 8


# ---- a hand-edited file is refused -------------------------------------------------------------------------
def test_edited_ids_under_an_equal_claim_are_refused(run, capsys, tmp_path):
    def change(record):
        record["choices"][0]["output_ids"][0][3] += 1  # question 81 turn 1 now differs at token 3
    _edit(run, "ngram", 81, change)
    err = _refused(run, capsys, tmp_path)
    assert "ngram.jsonl: question 81 turn 1: recorded first_divergence None but its output_ids and vanilla's " \
           "first differ at token 3" in err


def test_a_claim_of_equality_over_different_ids_is_refused(run, capsys, tmp_path):
    qid, turn, _ = DIVERGING
    _edit(run, "ngram", qid, lambda r: (r.__setitem__("first_divergence", [None, None]),
                                         r.__setitem__("equal_to_vanilla", True)))
    err = _refused(run, capsys, tmp_path)
    assert f"ngram.jsonl: question {qid} turn {turn + 1}: recorded first_divergence None but its output_ids and " \
           f"vanilla's first differ at token {DIVERGING[2]}" in err


def test_equal_to_vanilla_that_contradicts_first_divergence_is_refused(run, capsys, tmp_path):
    qid, turn, _ = DIVERGING
    _edit(run, "ngram", qid, lambda r: r.__setitem__("equal_to_vanilla", True))
    err = _refused(run, capsys, tmp_path)
    assert "ngram.jsonl:4: malformed answer record" in err
    assert f"question {qid}: equal_to_vanilla is True but turn {turn + 1} has first_divergence {DIVERGING[2]}" in err
    _edit(run, "ngram", 81, lambda r: r.__setitem__("equal_to_vanilla", False))
    _edit(run, "ngram", qid, lambda r: r.__setitem__("equal_to_vanilla", False))
    assert "question 81: equal_to_vanilla is False but no turn has a first_divergence" in _refused(run, capsys, tmp_path)


def test_edited_vanilla_ids_are_refused_too(run, capsys, tmp_path):
    def change(record):
        record["choices"][0]["output_ids"][1][0] += 1
    _edit(run, "vanilla", 82, change)
    err = _refused(run, capsys, tmp_path)
    assert "question 82 turn 2: recorded first_divergence None but its output_ids and vanilla's first differ at " \
           "token 0" in err


def test_every_reader_refuses_and_the_cli_exits_2(run, tmp_path):
    _edit(run, "ngram", 82, lambda r: (r.__setitem__("first_divergence", [1, None]),
                                        r.__setitem__("equal_to_vanilla", False)))
    with pytest.raises(SpecbenchError, match=r"question 82 turn 1: recorded first_divergence 1 but its output_ids "
                                             r"equal vanilla's"):
        load_run(run)
    import specbench

    with pytest.raises(SpecbenchError, match="question 82 turn 1"):
        specbench.load(run)
    result = subprocess.run([sys.executable, "-m", "specbench", "report", str(run), "--out", str(tmp_path / "r")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "question 82 turn 1" in result.stderr


def test_records_that_claim_nothing_are_not_refused(run):
    for drafter in ("vanilla", "ngram"):
        _edit(run, drafter, 81, lambda r: (r.__setitem__("first_divergence", None), r.pop("equal_to_vanilla")))
    answer = {r.question_id: r for r in load_run(run)["ngram"]}[81]
    assert answer.first_divergence is None and isinstance(answer, Answer)
