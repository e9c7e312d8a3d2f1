"""The CLI: bad input gives one line and exit code 2 without losing results; an end-to-end run on the
default model writes answers, manifest and a summary that agrees with the answer files; resume works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from specbench.harness.cli import main
from specbench.reports.summary import summarize
from specbench.results import load_run

DATA = Path(os.environ.get("SPECBENCH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specbench", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "SPECBENCH_DATA": str(DATA)}, timeout=900)


def cli_in_process(*args: str) -> subprocess.CompletedProcess:
    """``specbench ARGS`` run by `main` in this process, as `run_cli`'s result: its exit code (a parser's
    ``SystemExit`` included) and what it printed. For bad input, which `main` turns into one line and code 2
    before any model loads: a fresh interpreter per case cost ~4 s of imports each (48 cases, ~200 s of
    CI). An exception `main` lets through fails the test as a traceback would; the tests that start the real
    entry point (`run_cli`) stay for the paths where the process itself matters."""
    import contextlib
    import io
    from unittest import mock

    stdout, stderr = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, {"SPECBENCH_DATA": str(DATA)}), contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(["specbench", *args], code, stdout.getvalue(), stderr.getvalue())


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("specbench: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["run", "--drafters", "vanilla,nosuch"], ["unknown drafter 'nosuch'", "vanilla", "ngram"]),
        (["run", "--bench", "missing/question.jsonl"], ["question file not found"]),
        (["run", "--model", "missing-model.gguf"], ["model not found"]),
        (["run", "--max-new-tokens", "0"], ["--max-new-tokens must be at least 1"]),
        (["run", "--tree-budget", "0"], ["--tree-budget"]),
        (["run", "--drafters", "ngram,ngram"], ["more than once"]),
        (["run", "--categories", "nosuch"], ["unknown categories nosuch"]),
        (["run", "--categories", ","], ["--categories is empty"]),
        (["run", "--no-such-flag"], ["unrecognized arguments"]),
        (["run", "--drafter-option", "ngram"], ["DRAFTER.OPTION=VALUE"]),
        (["report", "missing-dir"], ["run directory not found"]),
        (["train", "nosuch"], ["unknown method 'nosuch'", "medusa", "ctc-ce"]),
        (["train", "ctc", "--anchors-per-sample", "-1"], ["--anchors-per-sample"]),
        (["train", "ctc", "--num-slots", "0"], ["--num-slots must be at least 1"]),
        (["train", "eagle", "--noise", "-1"], ["--noise must be 0 (none) or positive"]),
        (["train", "eagle", "--unroll", "0"], ["--unroll must be at least 1"]),
        (["train", "ctc", "--freeze-loaded"], ["--freeze-loaded is a medusa and hydra option, not ctc's"]),
        (["train", "eagle", "--own-lm-heads"], ["--own-lm-heads is a medusa and hydra option, not eagle's"]),
        (["train", "eagle3", "--ttt-steps", "0"], ["--ttt-steps must be at least 1"]),
        (["train", "eagle3", "--train-vocab", "50"], ["--train-vocab does not apply to eagle3"]),
        (["train", "eagle", "--ttt-steps", "3"], ["--ttt-steps is an eagle3 option, not eagle's"]),
        (["train", "eagle3", "--step-decay", "0"], ["--step-decay must be in (0, 1], not 0.0"]),
        (["train", "ctc", "--step-decay", "0.5"], ["--step-decay is an eagle3 option, not ctc's"]),
        (["train", "eagle", "--context-vocab"], ["--context-vocab is an eagle3 option, not eagle's"]),
        (["train", "eagle3", "--noise", "0.2"], ["--noise is an eagle option, not eagle3's"]),
        (["train", "eagle3", "--unroll", "3"], ["--unroll is an eagle option, not eagle3's"]),
        (["train", "eagle3", "--feature-weight", "-1"], ["--feature-weight must be 0 or more"]),
        (["train", "hydra", "--feature-weight", "1"], ["--feature-weight is an eagle and eagle3 option, not hydra's"]),
        (["train", "hydra", "--cache", "missing-cache"], ["no distillation cache at missing-cache"]),
        (["run", "--drafters", "ctc", "--drafter-option", "ctc.top_k=0"], ["drafter 'ctc'", "top_k >= 1"]),
        (["run", "--drafters", "ngram", "--drafter-option", "ngram.max_depth=0"], ["drafter 'ngram'", "max_depth"]),
        (["run", "--drafters", "ngram", "--drafter-option", "ngram.nosuch=1"], ["drafter 'ngram'", "nosuch"]),
        (["run", "--drafters", "hydra", "--drafter-option", "hydra.draft_vocab=-5"], ["drafter 'hydra'", "draft_vocab"]),
        (["run", "--drafters", "ctc", "--drafter-option", "ctc.context_vocab=maybe"],
         ["drafter 'ctc'", "context_vocab must be true or false"]),
        (["run", "--drafters", "vanilla", "--drafter-option", "vanilla.depth=3"], ["drafter 'vanilla'", "takes no options"]),
        (["run", "--drafters", "ngram", "--drafter-option", "hydra.top_k=3"], ["not in --drafters: hydra"]),
        (["run", "--device", "tpu"], ["--device must be cpu, cuda or cuda:N"]),
        (["run", "--device", "cuda:x"], ["--device must be"]),
        (["distill", "--train", "lots"], ["expected a number or 'all'"]),
        (["run", "--calibration", "heldout"], ["--calibration heldout needs questions the run leaves out", "--limit"]),
        (["run", "--calibration", "nosuch.jsonl"], ["nosuch.jsonl"]),
        (["replay", "--budgets", "0,4"], ["--budgets must be tree budgets of at least 1"]),
        (["replay", "--budgets", "four"], ["--budgets must be comma-separated integers"]),
        (["replay", "--drafters", "nosuch"], ["unknown drafter 'nosuch'"]),
        (["run", "--temperature", "-1"], ["--temperature must be 0 (greedy) or positive"]),
        (["run", "--temperature", "1", "--top-p", "0"], ["--top-p must be in (0, 1]"]),
        (["run", "--temperature", "1", "--top-k", "-2"], ["--top-k must be 0 (off) or positive"]),
        (["run", "--verify", "typical"], ["--verify typical needs --temperature > 0"]),
        (["run", "--temperature", "0.7", "--verify", "greedy"], ["--verify greedy needs --temperature 0"]),
        (["run", "--temperature", "1", "--verify", "typical", "--typical-delta", "0"], ["--typical-delta"]),
        (["run", "--verify", "nucleus"], ["invalid choice: 'nucleus'"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragments, tmp_path):
    assert_one_line_error(cli_in_process(*args, "--out", str(tmp_path / "o")) if args[0] == "run"
                          else cli_in_process(*args), *fragments)


@pytest.mark.parametrize("command", ["run", "replay"])
def test_max_new_tokens_past_the_context_window_is_one_line(tiny_model_dir, tmp_path, command):
    """Positions past ``max_position_embeddings`` are ones the model never saw (and a batch cache sized for them
    would not fit in memory): refused once the model is loaded, before any answer is written."""
    window = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    out = ["--out", str(tmp_path / "o")] if command == "run" else []
    result = cli_in_process(command, "--model", str(tiny_model_dir), "--drafters", "vanilla,ngram", "--limit", "1",
                            "--max-new-tokens", str(window), "--tree-budget" if command == "run" else "--budgets", "4",
                            "--no-progress", *out)
    assert_one_line_error(result, f"--max-new-tokens {window} does not fit", f"context window of {window} positions")
    assert not (tmp_path / "o" / "answers").exists() or not any((tmp_path / "o" / "answers").iterdir())


def test_out_that_is_a_file_is_one_line_before_loading_anything(tmp_path):
    existing = tmp_path / "results.txt"
    existing.write_text("keep me")
    result = run_cli("run", "--drafters", "vanilla", "--out", str(existing))
    assert_one_line_error(result, "is a file, not a directory")
    assert existing.read_text() == "keep me"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_cuda_device_is_one_line(tmp_path):
    assert_one_line_error(run_cli("run", "--device", "cuda", "--out", str(tmp_path / "o")), "torch sees no CUDA device")


def test_version_overview_and_python_dash_m():
    from specbench import __version__

    version = subprocess.run([sys.executable, "-m", "specbench", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == f"specbench {__version__}"
    for args in ([], ["-h"]):
        shown = subprocess.run([sys.executable, "-m", "specbench", *args], capture_output=True, text=True)
        assert shown.returncode == 0, shown.stderr
        for name in ("run", "report", "export", "list-drafters", "distill", "train"):
            assert f"\n  {name} " in shown.stdout and f"specbench {name}" in shown.stdout  # described, with an example


def test_every_flag_has_help_and_shows_its_default():
    import argparse

    from specbench.harness.cli import build_parser
    from specbench.harness.cli.common import HelpFormatter as _Help

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        assert "example: specbench" in sub.format_help(), name
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
            shown = _Help(name)._get_help_string(action)
            if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS):
                assert "default" in shown, f"{name} {action.option_strings} hides its default"


def test_missing_data_directory_names_the_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPECBENCH_DATA"}
    result = subprocess.run([sys.executable, "-m", "specbench", "run", "--bench", "mt_bench"],
                            capture_output=True, text=True, env=env)
    assert_one_line_error(result, "SPECBENCH_DATA")


def test_malformed_question_file_names_file_and_line(tmp_path):
    bad = tmp_path / "question.jsonl"
    bad.write_text('{"question_id": 1, "category": "x", "turns": ["hi"]}\n{"question_id": 2, "turns": ["a"]}\n')
    assert_one_line_error(run_cli("run", "--bench", str(bad), "--out", str(tmp_path / "o")), f"{bad}:2", "category")
    bad.write_text('{"question_id": 1, "category": "x", "turns": ["hi"]}\nnot json\n')
    assert_one_line_error(run_cli("run", "--bench", str(bad), "--out", str(tmp_path / "o")), f"{bad}:2", "JSON")


def test_existing_results_are_not_overwritten(tmp_path):
    answers = tmp_path / "answers"
    answers.mkdir()
    kept = answers / "vanilla.jsonl"
    kept.write_text("precious\n")
    assert_one_line_error(run_cli("run", "--out", str(tmp_path)), "--resume")
    assert kept.read_text() == "precious\n"


def test_list_drafters_shows_builtins_and_origin(capsys):
    assert main(["list-drafters"]) == 0
    out = capsys.readouterr().out
    assert "vanilla" in out and "ngram" in out and "entry point of specbench" in out


@pytest.mark.slow
def test_mt_bench_run_end_to_end_then_resume(tmp_path, default_model_available):
    """The default budget, `auto`, on the real model: the run reads this machine's cached profile (measured
    here at sizes 1-4, so `auto` chooses among budgets 1-4, as it picks on CPU) and calibrates on one turn of
    another question. The full grid and the four held-out questions (8 turns) `--limit 1` would calibrate on
    cost ~150 s more of CI; the tiny-model tests in test_tree_budgets.py cover the choice itself."""
    out = tmp_path / "run"
    profiled = run_cli("profile", "--sizes", "1,2,3,4", "--repeats", "3", "--no-progress")
    assert profiled.returncode == 0, profiled.stderr
    calibration = tmp_path / "calibration.jsonl"  # the first turn of a coding question the run does not ask
    question = next(q for q in map(json.loads, (DATA / "mt_bench" / "question.jsonl").read_text().splitlines())
                    if q["category"] == "coding" and q["question_id"] != 121)
    calibration.write_text(json.dumps(question | {"turns": question["turns"][:1]}) + "\n")
    args = ["run", "--drafters", "ngram,vanilla", "--bench", "mt_bench", "--categories", "writing,coding",
            "--limit", "1", "--max-new-tokens", "24", "--out", str(out), "--no-progress", "--breakdown",
            "--calibration", str(calibration)]
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["calibration"]["profile_source"] == "cache" and manifest["calibration"]["turns"] == 1
    assert manifest["config"]["tree_budget"] == "auto" and 1 <= manifest["budgets"]["ngram"]["budget"] <= 4
    runs = load_run(out)
    assert set(runs) == {"vanilla", "ngram"}
    for name, records in runs.items():
        assert [r.category for r in records] == ["writing", "coding"]
        for record in records:
            assert len(record.turns) == len(record.output_ids) == 2  # both MT-bench turns
            assert sum(record.accept_lengths) + len(record.output_ids) == sum(record.new_tokens)
            assert all(len(ids) == n for ids, n in zip(record.output_ids, record.new_tokens))
            assert record.equal_to_vanilla is True
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["max_new_tokens"] == 24 and manifest["data"]["sha256"]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["category"]) == ["writing", "coding", "overall"] * 2
    assert list(summary["drafter"][:3]) == ["vanilla"] * 3  # baseline first whatever the order asked
    overall = summary[summary.category == "overall"].set_index("drafter")
    tokens = sum(sum(r.new_tokens) for r in runs["ngram"])
    steps = [n for r in runs["ngram"] for n in r.accept_lengths]
    assert overall.loc["ngram", "new_tokens"] == tokens
    assert overall.loc["ngram", "tau"] == pytest.approx(sum(steps) / len(steps), rel=1e-5)
    assert overall.loc["ngram", "equal_to_vanilla"] == 1.0
    shares = overall.loc["ngram", ["draft_share", "transform_share", "verify_share", "accept_share", "other_share"]]
    assert shares.sum() == pytest.approx(1.0) and 0 <= overall.loc["ngram", "other_share"] < 0.2

    # Simulate an interruption: drop ngram's last question and cut a line short; --resume completes it.
    path = out / "answers" / "ngram.jsonl"
    first, second = path.read_text().splitlines()
    path.write_text(first + "\n" + second[:40])
    again = run_cli(*args, "--resume")
    assert again.returncode == 0, again.stderr
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and lines[0] == first
    assert len((out / "answers" / "vanilla.jsonl").read_text().splitlines()) == 2  # vanilla not rerun
    assert json.loads(lines[1])["equal_to_vanilla"] is True
    assert summarize(load_run(out)).shape[0] == 6

    # Resuming with other settings is refused, and nothing is lost.
    changed = cli_in_process(*[a if a != "24" else "32" for a in args], "--resume")
    assert_one_line_error(changed, "max_new_tokens")
    assert path.read_text().splitlines() == lines


@pytest.mark.slow
def test_sampled_run_records_its_settings_and_seeds_and_resumes(tmp_path, default_model_available):
    """A T > 0 run: every answer names its sampling settings, rule and per-turn seeds; ids are not compared
    with vanilla's; a turn is reproduced from its recorded seed; --resume with another seed is refused."""
    from specbench.harness.loop import generate
    from specbench.model import load_target
    from specbench.prompts import PromptBuilder
    from specbench.questions import load_questions
    from specbench.registry import create_drafter
    from specbench.sampling import Sampling

    out = tmp_path / "run"
    args = ["run", "--drafters", "vanilla,hydra", "--bench", "mt_bench", "--categories", "writing", "--limit", "1",
            "--max-new-tokens", "16", "--tree-budget", "4", "--temperature", "0.8", "--top-p", "0.95",
            "--seed", "3", "--out", str(out), "--no-progress"]
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    runs = load_run(out)
    for records in runs.values():
        record = records[0]
        assert record.sampling == {"temperature": 0.8, "top_p": 0.95, "top_k": 0, "verify": "rejection",
                                   "lossless": True}
        assert len(record.seeds) == 2 and record.seeds[0] != record.seeds[1]
        assert record.first_divergence is None and record.equal_to_vanilla is None
    assert runs["hydra"][0].seeds == runs["vanilla"][0].seeds  # seeds depend on question and turn only
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["verify"]) == {"rejection"} and summary["lossless"].all() and (summary["temperature"] == 0.8).all()
    assert summary["equal_to_vanilla"].isna().all()

    target = load_target("default")
    question = load_questions(DATA / "mt_bench" / "question.jsonl")[0]
    prompt = PromptBuilder(target.tokenizer).build(question.turns[:1], [])
    hydra = runs["hydra"][0]
    again = generate(target, create_drafter("hydra"), prompt, 16, 4, sampling=Sampling(0.8, 0.95), seed=hydra.seeds[0])
    assert again.output_ids == hydra.output_ids[0]

    assert_one_line_error(run_cli(*[a if a != "3" else "4" for a in args], "--resume"), "seed")


def test_train_step_decay_reaches_the_eagle3_config():
    """`--step-decay` sets the eagle3 training config's TTT loss decay and `--context-vocab` its context columns;
    left out, the config keeps its defaults."""
    from specbench.drafters.training.eagle3 import STEP_DECAY
    from specbench.harness.cli import build_parser
    from specbench.harness.cli.train import _train_config

    parser = build_parser()
    given = _train_config(parser.parse_args(["train", "eagle3", "--step-decay", "0.5"]), cache="c", out="o")
    default = _train_config(parser.parse_args(["train", "eagle3"]), cache="c", out="o")
    assert given.step_decay == 0.5 and default.step_decay == STEP_DECAY != 0.5
    context = _train_config(parser.parse_args(["train", "eagle3", "--context-vocab"]), cache="c", out="o")
    assert context.context_vocab is True and default.context_vocab is False


@pytest.mark.parametrize("method, flags, expected", [
    ("hydra", ["--init-from", "x", "--freeze-loaded"], {"freeze_loaded": True}),
    ("medusa", ["--own-lm-heads"], {"own_lm_heads": True}),
    ("eagle", ["--noise", "0.3", "--unroll", "3", "--feature-weight", "0.5"],
     {"noise": 0.3, "unroll": 3, "feature_weight": 0.5}),
    ("eagle3", ["--ttt-steps", "3", "--step-decay", "0.5", "--draft-vocab", "1000", "--context-vocab",
                "--feature-weight", "2"],
     {"ttt_steps": 3, "step_decay": 0.5, "draft_vocab": 1000, "context_vocab": True, "feature_weight": 2.0}),
])
def test_each_method_option_reaches_its_config(method, flags, expected):
    """Every name in `METHOD_OPTIONS` (declared once for the refusal and the config) is set on the config of a method
    that owns it; the cases together cover them all."""
    from specbench.harness.cli import build_parser
    from specbench.harness.cli.train import METHOD_OPTIONS, _train_config

    config = _train_config(build_parser().parse_args(["train", method, *flags]), cache="c", out="o")
    assert {name: getattr(config, name) for name in expected} == expected
    covered = {"freeze_loaded", "own_lm_heads", "noise", "unroll", "ttt_steps", "step_decay", "draft_vocab",
               "context_vocab", "feature_weight"}
    assert set(METHOD_OPTIONS) == covered


def test_a_reader_that_stops_early_gets_no_traceback():
    """``specbench report RUN | head -1``: the pipe closes while the report prints; no traceback follows."""
    run = Path(__file__).resolve().parents[1] / "docs" / "runs" / "main-job-epyc-b61aa5c"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(f"{sys.executable} -m specbench report {run} --out {out} --formats csv --charts none | head -1",
                              shell=True, capture_output=True, text=True, env=env)
    assert done.stdout.startswith("==") and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
