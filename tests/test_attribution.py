"""Divergence attribution (issue 40 item 2; docs/decisions.md, "Divergence attribution").

Fast tests, on tiny random targets: the bound's formula; `Rescorer.attribute_turn` on divergences built by
hand (a spliced-in worst token is a mismatch, the fp32 runner-up at a near-tie is a near-tie, a turn after
a diverged one is judged by its tokens' deficits, a strict prefix is a mismatch); `attribute_run` writing
its results into a run's answer files, which the summary, the report and the claim check then read; a
bf16 run end to end through `specbench run`.

Slow tests, on the default model (SmolLM2-135M) in bf16: the bound holds for every top-5 margin of
teacher-forced MT-bench text (the empirical check the derivation asks for); a planted wrong KV commit
(tests/planted_kv_bug.py) comes out as mismatch in every turn it changes, flagged by `specbench run` and
`specbench report`; an honest run has no mismatch; `specbench attribute` re-derives a stored run's results.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from conftest import build_tiny_model, make_target, plain_greedy
from specbench import kv
from specbench.errors import SpecbenchError
from specbench.harness.attribution import ACCUMULATION, UNIT_ROUNDOFF, Rescorer, RoundingBound, attribute_run
from specbench.harness.cli import main
from specbench.questions import Question
from specbench.reports.summary import summarize
from specbench.results import MISMATCH, NEAR_TIE, load_run, read_answers

pytestmark = pytest.mark.usefixtures("single_thread")
PROMPT = [5, 17, 42, 8, 77, 23, 61, 9, 33, 50, 14, 70]


# ---- the bound ---------------------------------------------------------------------------------------------
def test_bound_formula_and_order():
    config = SimpleNamespace(hidden_size=576, intermediate_size=1536, num_hidden_layers=30)
    bounds = {dtype: RoundingBound.of(config, dtype) for dtype in UNIT_ROUNDOFF}
    for dtype, bound in bounds.items():
        per_layer = UNIT_ROUNDOFF[dtype] + math.sqrt(1536) * ACCUMULATION
        assert bound.factor() == pytest.approx((math.sqrt(30) + 1) * per_layer)
        assert bound.factor(4096) == pytest.approx((math.sqrt(30) + 1) * (UNIT_ROUNDOFF[dtype] + 64 * ACCUMULATION))
    assert bounds["bfloat16"].factor() == pytest.approx(0.02531, rel=1e-3)  # docs/decisions.md's figure
    assert bounds["bfloat16"].factor() > 7 * bounds["float16"].factor() > 50 * bounds["float32"].factor()
    with pytest.raises(SpecbenchError, match="int8"):
        RoundingBound.of(config, "int8")


# ---- one turn, by hand -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    target = make_target(build_tiny_model("qwen2"))
    reference = plain_greedy(target.model, PROMPT, 24, target.eos_ids)
    return target, reference


def _ratios(rescorer: Rescorer, prompt: list[int], ids: list[int]) -> list[tuple[float, int, int]]:
    """(top-2 gap / bound, runner-up, position) at every position of ``ids``."""
    hidden, logits = rescorer.logits(prompt, ids)
    out = []
    for k in range(len(ids)):
        values, tokens = logits[k].topk(2)
        bound = rescorer.bound.factor(len(prompt) + k) * rescorer._scale(hidden[k], int(tokens[0]), int(tokens[1]))
        out.append((float(values[0] - values[1]) / bound, int(tokens[1]), k))
    return out


def test_a_far_worse_token_is_a_mismatch(tiny):
    target, reference = tiny
    rescorer = Rescorer(target, "bfloat16")
    _, logits = rescorer.logits(PROMPT, reference)
    d = 5
    worst = int(logits[d].argmin())
    ids = reference[:d] + [worst] + reference[d + 1:]
    entry = rescorer.attribute_turn(PROMPT, ids, reference, shared_prompt=True)
    assert entry["status"] == MISMATCH and entry["reason"] == "margin" and entry["position"] == d
    assert entry["tokens"] == [reference[d], worst]
    assert entry["margin"] == pytest.approx(float(logits[d, reference[d]] - logits[d, worst]), rel=1e-5)
    assert entry["margin"] > entry["bound"] > 0 and entry["over_bound"] > 1


def test_the_runner_up_at_a_near_tie_is_a_near_tie_and_not_in_fp32(tiny):
    target, reference = tiny
    rescorer = Rescorer(target, "bfloat16")
    ratio, runner_up, d = min(_ratios(rescorer, PROMPT, reference))
    assert ratio < 1, "the tiny target has no near-tie in 24 tokens: pick another seed"
    ids = reference[:d] + [runner_up]
    ids += plain_greedy(target.model, PROMPT + ids, len(reference) - len(ids), target.eos_ids)  # greedy from there
    entry = rescorer.attribute_turn(PROMPT, ids, reference, shared_prompt=True)
    assert entry["status"] == NEAR_TIE and "reason" not in entry and entry["position"] == d
    assert 0 < entry["margin"] <= entry["bound"] and entry["over_bound"] == pytest.approx(ratio, rel=1e-4)
    # the same divergence in an fp32 run: the bound is ~1600x smaller, so the runner-up is a mismatch
    assert Rescorer(target, "float32").attribute_turn(PROMPT, ids, reference, True)["status"] == MISMATCH


def test_a_turn_after_a_diverged_one_is_judged_by_its_deficits(tiny):
    target, reference = tiny
    rescorer = Rescorer(target, "bfloat16")
    other_prompt = PROMPT[:-1] + [3]  # as if an earlier answer differed: vanilla's ids are no reference
    own = plain_greedy(target.model, other_prompt, 24, target.eos_ids)
    entry = rescorer.attribute_turn(other_prompt, own, reference, shared_prompt=False)
    assert entry["status"] == NEAR_TIE and entry["margin"] is None and entry["deficit"] == 0.0
    _, logits = rescorer.logits(other_prompt, own)
    spliced = own[:7] + [int(logits[7].argmin())] + own[8:]
    entry = rescorer.attribute_turn(other_prompt, spliced, reference, shared_prompt=False)
    assert entry["status"] == MISMATCH and entry["reason"] == "deficit" and entry["deficit_position"] == 7
    assert entry["deficit"] > entry["deficit_bound"]


def test_a_strict_prefix_is_a_mismatch_and_equal_ids_cost_nothing(tiny):
    target, reference = tiny
    rescorer = Rescorer(target, "bfloat16")
    entry = rescorer.attribute_turn(PROMPT, reference[:-3], reference, shared_prompt=True)
    assert entry["status"] == MISMATCH and entry["reason"] == "length" and entry["position"] == len(reference) - 3
    assert rescorer.attribute_turn(PROMPT, list(reference), reference, True) == {"status": "equal"}
    with pytest.raises(ValueError, match="float32"):
        Rescorer(make_target(build_tiny_model("qwen2").to(torch.bfloat16)), "bfloat16")


# ---- a run directory ---------------------------------------------------------------------------------------
class _Prompts:
    """Prompt ids of a synthetic conversation: the question's ids, then each earlier answer's ids."""

    def build(self, questions, answers) -> list[int]:
        ids = []
        for i, question in enumerate(questions):
            ids += [int(t) for t in question.split()]
            if i < len(answers):
                ids += [int(t) for t in answers[i].split()]
        return ids


def _record(drafter: str, qid: int, outputs: list[list[int]], reference: list[list[int]] | None) -> dict:
    from specbench.results import first_divergence

    divergence = [None] * len(outputs) if reference is None else \
        [first_divergence(ids, ref) for ids, ref in zip(outputs, reference)]
    steps = [[{"nodes": 1, "depth": 0, "accepted": 1, "stage_ms": None} for _ in ids[1:]] for ids in outputs]
    return {"question_id": qid, "category": "writing", "answer_id": f"{drafter}{qid}", "model_id": "tiny",
            "tstamp": 1.0, "drafter": drafter,
            "choices": [{"index": 0, "turns": [" ".join(map(str, ids)) for ids in outputs],
                         "new_tokens": [len(ids) for ids in outputs], "wall_time": [0.1] * len(outputs),
                         "decoding_steps": [len(s) for s in steps], "accept_lengths": [1 for s in steps for _ in s],
                         "output_ids": outputs, "steps": steps, "prefill_ms": [1.0] * len(outputs),
                         "wall_time_repeats": [[0.1]] * len(outputs)}],
            "equal_to_vanilla": all(d is None for d in divergence), "first_divergence": divergence,
            "tree_budget": 4, "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "verify": "greedy",
                                           "lossless": True}}


def _write_run(folder: Path, target, dtype: str = "bfloat16") -> tuple[Path, list[Question]]:
    """Vanilla (fp32 greedy) and "spliced" (a far-worse token in question 1's first turn, so its second
    turn's prompt differs; question 2 equal) over two questions of two turns."""
    prompts = _Prompts()
    questions = [Question(1, "writing", (" ".join(map(str, PROMPT)), "4 5 6")),
                 Question(2, "writing", ("60 12 88 31", "7 8"))]
    lines = {"vanilla": [], "spliced": []}
    for question in questions:
        outputs = {"vanilla": [], "spliced": []}
        for name in outputs:
            for t in range(2):
                prompt = prompts.build(question.turns[: t + 1], [" ".join(map(str, o)) for o in outputs[name]])
                ids = plain_greedy(target.model, prompt, 16, target.eos_ids)
                if name == "spliced" and question.question_id == 1 and t == 0:
                    _, logits = Rescorer(target, dtype).logits(prompt, ids)
                    ids = ids[:4] + [int(logits[4].argmin())]
                    ids += plain_greedy(target.model, prompt + ids, 16 - len(ids), target.eos_ids)
                outputs[name].append(ids)
        lines["vanilla"].append(_record("vanilla", question.question_id, outputs["vanilla"], None))
        lines["spliced"].append(_record("spliced", question.question_id, outputs["spliced"], outputs["vanilla"]))
    (folder / "answers").mkdir(parents=True)
    for name, records in lines.items():
        (folder / "answers" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "manifest.json").write_text(json.dumps({"config": {"dtype": dtype, "drafters": ["vanilla", "spliced"]}}))
    return folder, questions


def test_attribute_run_writes_each_turn_and_the_summary_counts_them(tiny, tmp_path):
    target, _ = tiny
    run, questions = _write_run(tmp_path / "run", target)
    loads = []

    def scorer():
        loads.append(1)
        return target

    before = summarize(load_run(run)).set_index(["drafter", "category"])
    assert before.loc[("spliced", "overall"), "unattributed_turns"] == 2  # two divergent turns, not re-scored yet
    result = attribute_run(run, scorer, _Prompts(), questions, log=lambda text: None)
    assert loads == [1] and result.rescored == 2
    records = {r.question_id: r for r in read_answers(run / "answers" / "spliced.jsonl")}
    first, second = records[1].attribution
    assert first["status"] == MISMATCH and first["reason"] == "margin" and first["shared_prompt"] is True
    assert second["shared_prompt"] is False and second["margin"] is None  # its prompt holds the spliced answer
    assert second["status"] == NEAR_TIE  # its own tokens are the target's greedy ones
    assert records[2].attribution == [{"status": "equal"}] * 2
    assert all(r.attribution == [{"status": "equal"}] * 2 for r in read_answers(run / "answers" / "vanilla.jsonl"))
    summary = summarize(load_run(run)).set_index(["drafter", "category"])
    row = summary.loc[("spliced", "overall")]
    assert (row["turns"], row["equal_turns"], row["near_tie_turns"], row["mismatch_turns"],
            row["unattributed_turns"]) == (4, 2, 1, 1, 0)
    assert row["max_over_bound"] == pytest.approx(first["over_bound"], rel=1e-5) and row["max_over_bound"] > 1
    assert summary.loc[("vanilla", "overall"), "equal_turns"] == 4
    # a second pass re-scores nothing (loads nothing); --force re-scores the same
    assert attribute_run(run, scorer, _Prompts(), questions, log=lambda text: None).rescored == 0 and loads == [1]
    again = attribute_run(run, scorer, _Prompts(), questions, force=True, log=lambda text: None)
    assert again.rescored == 2
    assert read_answers(run / "answers" / "spliced.jsonl")[0].attribution == records[1].attribution


def test_mismatch_is_loud_in_the_summary_table_and_the_report(tiny, tmp_path, capsys):
    target, _ = tiny
    run, questions = _write_run(tmp_path / "run", target)
    attribute_run(run, lambda: target, _Prompts(), questions, log=lambda text: None)
    assert main(["report", str(run), "--out", str(tmp_path / "report"), "--charts", "none", "--formats", "md,csv"]) == 0
    printed = capsys.readouterr().out
    assert "ids vs vanilla, spliced: 2 equal, 1 near-tie, 1 mismatch of 4 turns" in printed
    assert "WARNING: spliced: 1 of 4 turns MISMATCH vanilla beyond rounding" in printed
    text = (tmp_path / "report" / "report.md").read_text()
    assert "ids equal / near-tie / mismatch |" in text
    assert "| 2 / 1 / 1 (max " in text and "MISMATCH |" in text
    assert "WARNING: spliced has 1 MISMATCH turn(s) of 4" in text
    paper = pd.read_csv(tmp_path / "report" / "csv" / "paper.csv").set_index("drafter")
    label = [c for c in paper.columns if c.endswith(" mismatch_turns")][0]
    assert paper.loc["spliced", label] == 1 and paper.loc["vanilla", label] == 0


def test_unattributed_divergences_are_named(tiny, tmp_path, capsys):
    target, _ = tiny
    run, _ = _write_run(tmp_path / "run", target)
    assert main(["report", str(run), "--out", str(tmp_path / "report"), "--charts", "none", "--formats", "md"]) == 0
    printed = capsys.readouterr().out
    assert "2 divergent not attributed" in printed and "`specbench attribute RUN_DIR` re-scores them" in printed
    assert "+2 unattributed" in (tmp_path / "report" / "report.md").read_text()


def test_a_scorer_that_cannot_load_leaves_turns_unattributed(tiny, tmp_path):
    target, _ = tiny
    run, questions = _write_run(tmp_path / "run", target)
    said = []

    def no_memory():
        raise RuntimeError("CUDA out of memory. Tried to allocate 28.00 GiB")

    result = attribute_run(run, no_memory, _Prompts(), questions, log=said.append)
    assert result.skipped.startswith("RuntimeError: CUDA out of memory") and result.rescored == 0
    assert "specbench attribute" in said[-1]
    assert all(r.attribution is None or r.question_id == 2 for r in read_answers(run / "answers" / "spliced.jsonl"))
    assert summarize(load_run(run)).set_index(["drafter", "category"]).loc[("spliced", "overall"), "unattributed_turns"] == 2


def test_a_tampered_attribution_is_refused(tiny, tmp_path):
    target, _ = tiny
    run, questions = _write_run(tmp_path / "run", target)
    attribute_run(run, lambda: target, _Prompts(), questions, log=lambda text: None)
    path = run / "answers" / "spliced.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    record["attribution"][0] = {"status": "near-tie", "position": 3}  # question 2 turn 1: its ids equal vanilla's
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    with pytest.raises(SpecbenchError, match=r"spliced.jsonl: question 2 turn 1: recorded attribution 'near-tie' "
                                             r"at token 3 but its output_ids equal vanilla's"):
        load_run(run)


# ---- end to end, tiny model ------------------------------------------------------------------------------
def test_a_bf16_run_attributes_its_divergences(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--model", str(tiny_model_dir), "--drafters", "vanilla,ngram", "--bench", "demo",
                 "--categories", "writing,coding", "--limit", "1", "--max-new-tokens", "48", "--tree-budget", "6",
                 "--dtype", "bfloat16", "--threads", "1", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    summary = pd.read_csv(out / "summary.csv").set_index(["drafter", "category"])
    row = summary.loc[("ngram", "overall")]
    assert row["turns"] == 4 and row["unattributed_turns"] == 0 and row["mismatch_turns"] == 0
    assert row["equal_turns"] + row["near_tie_turns"] == 4
    assert "ids vs vanilla, ngram:" in printed and "WARNING" not in printed
    for record in read_answers(out / "answers" / "ngram.jsonl"):
        assert len(record.attribution) == 2 and all(e["status"] in ("equal", NEAR_TIE) for e in record.attribution)


# ---- the default model (slow) -----------------------------------------------------------------------------
BF16_RUN = ["--bench", "mt_bench", "--categories", "writing,reasoning", "--limit", "1", "--max-new-tokens", "64",
            "--tree-budget", "8", "--dtype", "bfloat16", "--threads", "1", "--no-progress",
            "--no-warmup"]  # ids and margins do not depend on a warm-up; it would add an eighth of the decoding
SLOW_DRAFTERS = "vanilla,ngram,hydra,eagle"


@pytest.mark.slow
def test_the_bound_holds_for_bf16_and_fp16_margins_of_the_default_model(default_model_available):
    """Teacher-forced MT-bench text: every margin between the fp32 top token and the next four, computed by
    the bf16 (fp16) target one token at a time, is within the bound of the fp32 margin."""
    from specbench.harness.loop import generate
    from specbench.model import load_target
    from specbench.prompts import PromptBuilder
    from specbench.questions import load_questions, resolve_bench
    from specbench.registry import create_drafter
    from specbench.tree import DraftTree

    fp32 = load_target("default", "cpu", "float32")
    rescorer = Rescorer(fp32, "bfloat16")
    prompts = PromptBuilder(fp32.tokenizer)
    questions = load_questions(resolve_bench("mt_bench"))[::40][:2]
    worst = {}
    for dtype in ("bfloat16", "float16"):
        low = load_target("default", "cpu", dtype)
        bound = RoundingBound.of(fp32.config, dtype)
        ratios = []
        for question in questions:
            prompt = prompts.build(question.turns[:1], [])
            ids = generate(low, create_drafter("vanilla"), prompt, 48, 1).output_ids
            hidden, logits = rescorer.logits(prompt, ids)
            with torch.inference_mode():
                cache = low.new_cache()
                row, _ = low.prefill(torch.tensor(prompt), cache)
                rows = [row.float()]
                for token in ids[:-1]:
                    rows.append(low.forward_tree(DraftTree.root_only(token), cache)[0][0].float())
            for k, low_logits in enumerate(rows):
                top = logits[k].topk(5).indices.tolist()
                for b in top[1:]:
                    error = abs(float(low_logits[top[0]] - low_logits[b]) - float(logits[k, top[0]] - logits[k, b]))
                    ratios.append(error / (bound.factor(len(prompt) + k) * rescorer._scale(hidden[k], top[0], b)))
        worst[dtype] = max(ratios)
    print(f"\nlargest rounding error / bound: {worst}")
    assert all(0 < ratio < 1 for ratio in worst.values()), worst


@pytest.fixture(scope="module")
def honest_bf16_run(default_model_available, tmp_path_factory) -> tuple[Path, str]:
    """One honest bf16 run of SLOW_DRAFTERS and what it printed. The planted-bug run starts from its vanilla
    answers: vanilla proposes only the root, which the planted commit leaves as it is, so rerunning vanilla
    would reproduce the same ids (about a quarter of each run's CI time)."""
    out = tmp_path_factory.mktemp("bf16") / "honest"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["run", "--drafters", SLOW_DRAFTERS, *BF16_RUN, "--out", str(out)]) == 0
    return out, printed.getvalue()


@pytest.mark.slow
def test_a_planted_wrong_kv_commit_in_bf16_is_a_mismatch(honest_bf16_run, tmp_path, monkeypatch, capsys):
    from planted_kv_bug import wrong_node_commit

    honest, _ = honest_bf16_run
    out = tmp_path / "bug"
    (out / "answers").mkdir(parents=True)
    shutil.copy(honest / "manifest.json", out / "manifest.json")
    shutil.copy(honest / "answers" / "vanilla.jsonl", out / "answers" / "vanilla.jsonl")
    monkeypatch.setattr(kv, "commit_path", wrong_node_commit)
    assert main(["run", "--drafters", SLOW_DRAFTERS, *BF16_RUN, "--out", str(out), "--resume"]) == 0
    monkeypatch.undo()
    printed = capsys.readouterr().out
    runs = load_run(out)
    summary = summarize(runs).set_index(["drafter", "category"])
    for drafter in SLOW_DRAFTERS.split(",")[1:]:
        row = summary.loc[(drafter, "overall")]
        # flagged: a turn the bug barely moved can stay within rounding (docs/decisions.md: measured), so the
        # drafter, not every turn, must come out as mismatch
        assert row["mismatch_turns"] >= 1 and row["unattributed_turns"] == 0, drafter
        assert f"WARNING: {drafter}:" in printed
        for record in runs[drafter]:
            for entry in record.attribution:
                assert (entry["status"] == MISMATCH) == (entry.get("over_bound", 0) > 1)
        if drafter in ("hydra", "eagle"):
            # trees whose multi-node paths are accepted at most steps, so the bug reaches most of them: most
            # divergent turns are mismatches, far beyond the bound. Not ngram: it rarely accepts a multi-node path in
            # 64 tokens, so an honest bf16 near-tie can come first and its mismatch can be barely over the bound
            # (1 mismatch, 3 near-ties, 1.28x the bound at 1 thread on a 2-core Xeon without AVX-512 bf16)
            assert row["mismatch_turns"] > row["near_tie_turns"] and row["max_over_bound"] > 2, drafter
    # the report says so too
    assert main(["report", str(out), "--out", str(tmp_path / "report"), "--charts", "none", "--formats", "md"]) == 0
    assert "MISMATCH" in capsys.readouterr().out
    assert "WARNING: hydra has" in (tmp_path / "report" / "report.md").read_text()

    # `specbench attribute` re-derives the stored run's results from the answers and the model alone
    path = out / "answers" / "hydra.jsonl"
    stored = read_answers(path)
    for record in stored:
        record.attribution = None
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in stored))
    assert main(["attribute", str(out), "--threads", "1"]) == 0
    again = read_answers(path)
    assert [r.attribution for r in again] == [r.attribution for r in runs["hydra"]]


@pytest.mark.slow
def test_an_honest_bf16_run_has_no_mismatch(honest_bf16_run):
    out, printed = honest_bf16_run
    assert "WARNING" not in printed and "ids vs vanilla, hydra:" in printed
    summary = summarize(load_run(out)).set_index(["drafter", "category"])
    for drafter in SLOW_DRAFTERS.split(",")[1:]:
        row = summary.loc[(drafter, "overall")]
        assert row["mismatch_turns"] == 0 and row["unattributed_turns"] == 0, drafter
        assert row["equal_turns"] + row["near_tie_turns"] == row["turns"] == 4
        assert not row["max_over_bound"] >= 1
