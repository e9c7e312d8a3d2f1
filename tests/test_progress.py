"""Progress of the long phases (`specbench.progress`): each phase reports its count to listeners whether or
not a bar is drawn; a bar (phase name, count, rate, time left) goes to stderr only when it is a terminal,
the caller wants it and ``SPECBENCH_NO_PROGRESS`` is unset; drawing one never warns. The profile, the
calibration's greedy pass and the replays report through it."""

from __future__ import annotations

import io
import warnings

import pytest

from conftest import build_tiny_model, make_target
from specbench import progress
from specbench.drafters.ngram import NgramDrafter
from specbench.drafters.vanilla import VanillaDrafter
from specbench.harness.autobudget.profile import measure_profile
from specbench.harness.autobudget.replay import sweep
from specbench.harness.autobudget.trajectories import cached_trajectories, record_trajectory
from specbench.questions import Question


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Recorder:
    """A listener: every (phase, done, total) it was told, and the last count per phase."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def __call__(self, name: str, done: int, total: int) -> None:
        self.events.append((name, done, total))

    def last(self) -> dict[str, tuple[int, int]]:
        return {name: (done, total) for name, done, total in self.events}


def fake_terminal(monkeypatch) -> FakeTerminal:
    """stderr as a terminal (set inside the test: pytest resets sys.stderr after fixtures run)."""
    stream = FakeTerminal()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.delenv(progress.ENV_OFF, raising=False)
    return stream


@pytest.fixture(scope="module")
def llama():
    return make_target(build_tiny_model("llama"))


def test_listeners_count_every_update_without_a_terminal():
    recorder = Recorder()
    with progress.listen(recorder):
        assert not progress.bars_wanted()  # pytest's captured stderr is not a terminal
        items = list(progress.iterate(range(5), "phase a", total=5, unit="item"))
        with progress.phase("phase b", 3) as bar:
            bar.update(2)
            bar.update(1, loss="1.0")
    assert items == [0, 1, 2, 3, 4]
    assert [e for e in recorder.events if e[0] == "phase a"] == [("phase a", n, 5) for n in range(6)]
    assert recorder.last() == {"phase a": (5, 5), "phase b": (3, 3)}
    recorder.events.clear()
    progress.phase("after", 1).update(1)  # the listener was removed with its block
    assert recorder.events == []


def test_a_bar_shows_phase_count_rate_and_time_left_on_a_terminal_without_warnings(monkeypatch):
    terminal = fake_terminal(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with progress.phase("greedy pass", 4, "turn") as bar:
            for _ in range(4):
                bar.update(1)
    assert not caught, [str(w.message) for w in caught]
    text = terminal.getvalue()
    assert "greedy pass" in text and "4/4 turn" in text and "turn/s" in text and "<00:00" in text


@pytest.mark.parametrize("how", ["env", "flag", "block"])
def test_bars_are_off_with_the_env_var_the_flag_or_an_enclosing_block(monkeypatch, how):
    terminal = fake_terminal(monkeypatch)
    assert progress.bars_wanted()  # a terminal, nothing turned off
    if how == "env":
        monkeypatch.setenv(progress.ENV_OFF, "1")
    recorder = Recorder()
    with progress.listen(recorder), progress.enabled(how != "block"):
        with progress.phase("p", 2, show=False if how == "flag" else None) as bar:
            bar.update(2)
        with progress.enabled(True):  # an inner block cannot turn bars back on
            assert progress.bars_wanted() == (how == "flag")
    assert terminal.getvalue() == ""
    assert recorder.last() == {"p": (2, 2)}  # listeners are told all the same


def test_the_profile_reports_each_forward(llama):
    recorder = Recorder()
    with progress.listen(recorder):
        measure_profile(llama, sizes=[1, 4], shapes=["chain"], prefix=8, repeats=2, warmup=1)
    # (1 warm-up + 2 repeats) x 2 sizes; a tiny model's noisy 4-node forward may time below one node, and
    # then more rounds follow under their own phase (`measure_profile`)
    assert recorder.last()["verify-cost profile"] == (6, 6)


class NumberPrompts:
    """A stand-in `PromptBuilder` for a tokenizer-less tiny model: a turn's text is its token ids."""

    def build(self, turns, answers) -> list[int]:
        ids = [int(t) for turn in turns for t in turn.split()]
        return ids + [7 for _ in answers]

    def answer_text(self, ids) -> str:
        return " ".join(map(str, ids))


def test_the_greedy_pass_reports_each_turn_then_a_cached_read_reports_nothing(llama, tmp_path):
    questions = [Question(1, "math", ("5 17 42", "8 9")), Question(2, "coding", ("3 4 5",))]
    recorder = Recorder()
    with progress.listen(recorder):
        cached_trajectories(llama, NumberPrompts(), questions, 6, None, tmp_path)
    assert recorder.last() == {"greedy pass": (3, 3)}
    recorder.events.clear()
    with progress.listen(recorder):
        cached_trajectories(llama, NumberPrompts(), questions, 6, None, tmp_path)
    assert recorder.events == []


def test_replays_report_each_drafter_budget_and_turn(llama):
    turns = [("calibration", record_trajectory(llama, prompt, 12)) for prompt in ([5, 17, 42, 8], [60, 12, 60, 12])]
    recorder = Recorder()
    with progress.listen(recorder):
        sweep(llama, {"vanilla": VanillaDrafter(), "ngram": NgramDrafter()}, turns, [1, 4], 12, label="replay x")
    assert recorder.last() == {"replay x": (8, 8)}  # 2 drafters x 2 budgets x 2 turns
