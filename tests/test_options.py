"""Options are declared once (`harness.config.RunConfig`, `harness.options`): the command line, the Python
API and resume's keys follow from one field. The fixture adds one option with one declaration and the
tests find it everywhere."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pytest

import specbench
from specbench.errors import SpecbenchError
from specbench.harness import api
from specbench.harness.cli import main
from specbench.harness.cli import run as run_commands
from specbench.harness.config import RunConfig
from specbench.harness.options import at_least, declared, integer, option, resume_keys


@dataclass
class WithDraftBias(RunConfig):
    draft_bias: int = option(3, "a setting a new drafter needs", parse=integer, check=at_least(1))  # the one edit


@pytest.fixture
def new_option(monkeypatch):
    """`RunConfig` with the new option, where the command line and the API take their config class from."""
    monkeypatch.setattr(run_commands, "RunConfig", WithDraftBias)
    monkeypatch.setattr(api, "RunConfig", WithDraftBias)


def test_the_new_option_is_a_flag_with_help_and_default(new_option, capsys):
    with pytest.raises(SystemExit):
        main(["run", "-h"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--draft-bias DRAFT_BIAS a setting a new drafter needs (default: 3)" in shown


def test_the_flag_is_parsed_and_checked_by_the_declaration(new_option, capsys):
    from specbench.harness.cli import build_parser
    from specbench.harness.options import given

    args = build_parser().parse_args(["run", "--drafters", "vanilla", "--draft-bias", "5"])
    assert WithDraftBias(**given(args, WithDraftBias)).draft_bias == 5
    assert main(["run", "--drafters", "vanilla", "--draft-bias", "0"]) == 2
    assert capsys.readouterr().err.strip() == "specbench: error: --draft-bias must be at least 1, got 0"
    assert main(["run", "--draft-bias", "many"]) == 2
    assert capsys.readouterr().err.strip() == "specbench: error: --draft-bias: expected an integer, got 'many'"


def test_the_api_takes_it_as_a_keyword_with_the_same_check(new_option):
    with pytest.raises(SpecbenchError, match="^--draft-bias must be at least 1, got 0$"):
        specbench.run(drafters="vanilla", draft_bias=0)
    with pytest.raises(SpecbenchError, match="unknown run option"):
        specbench.run(drafters="vanilla", draft_bias_typo=1)
    assert WithDraftBias(draft_bias="7").draft_bias == 7  # text, as a notebook might pass it


def test_resume_refuses_a_run_with_another_value(tmp_path):
    from specbench.harness.runner import Run

    assert "draft_bias" in resume_keys(WithDraftBias) and "draft_bias" not in resume_keys(RunConfig)
    out = tmp_path / "run"
    (out / "answers").mkdir(parents=True)
    (out / "answers" / "vanilla.jsonl").write_text("")
    recorded = WithDraftBias(out=str(out), drafters=["vanilla"])
    (out / "manifest.json").write_text(json.dumps({"config": asdict(recorded)}))
    Run(WithDraftBias(out=str(out), drafters=["vanilla"], resume=True))  # same settings: resumes
    with pytest.raises(SpecbenchError, match=r"--resume with different settings .*draft_bias: 3 -> 5"):
        Run(WithDraftBias(out=str(out), drafters=["vanilla"], resume=True, draft_bias=5))


def test_every_run_flag_comes_from_a_declaration():
    """`run`'s flags are RunConfig's options and --no-progress (a display setting, not a run's)."""
    import argparse

    from specbench.harness.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    dests = {a.dest for a in commands.choices["run"]._actions if not isinstance(a, argparse._HelpAction)}
    assert dests == set(declared(RunConfig)) | {"no_progress"}


@pytest.mark.parametrize("given, message", [
    ({"drafters": 5}, "--drafters: expected comma-separated text or a list of strings, got 5"),
    ({"categories": ["writing", 3]}, "--categories: expected comma-separated text or a list of strings"),
    ({"seed": 1.5}, "--seed: expected an integer, got 1.5"),
    ({"limit": True}, "--limit: expected an integer, got True"),
    ({"temperature": "hot"}, "--temperature: expected a number, got 'hot'"),
    ({"batch_size": [1, "4"]}, "--batch-size: expected comma-separated integers or a list of integers"),
    ({"bench": None}, "--bench: expected a value, got None"),
    ({"template": 7}, "--template: expected text, got 7"),
])
def test_an_api_value_of_the_wrong_kind_is_one_line_naming_the_option(given, message):
    """The API's typed values meet the same declarations as text: a wrong kind stops with the flag's name,
    not a TypeError deep in the run (drafters=5) or a silent truncation (seed=1.5)."""
    with pytest.raises(SpecbenchError, match="^" + message.replace("[", r"\[").replace("(", r"\(")):
        RunConfig(**given)


def test_api_values_of_the_right_kind_pass_as_given(tmp_path):
    config = RunConfig(drafters=("vanilla", "ngram"), batch_size=4, temperature=1, out=tmp_path / "run",
                       bench=tmp_path / "question.jsonl")
    assert config.drafters == ["vanilla", "ngram"] and config.batch_size == [4] and config.temperature == 1
    assert config.out == str(tmp_path / "run") and config.bench == str(tmp_path / "question.jsonl")
