"""``--out`` means one thing for every command: the directory the command writes into (run, report, export,
distill, convert). A command that writes a single file names its flag for it (profile --out-file, replay
--out-csv, train --out-checkpoint) and refuses ``--out`` with one line naming that flag. A bad value is a
one-line error with exit code 2, before any model loads."""

from __future__ import annotations

import pytest

from specbench.harness.cli import build_parser, main
from specbench.harness.cli.common import OUT_DIR_COMMANDS

FILE_FLAGS = {"profile": "--out-file", "replay": "--out-csv", "train": "--out-checkpoint"}
POSITIONAL = {"report": ["RUN"], "export": ["RUN"], "convert": ["medusa"], "train": ["medusa"]}


def one_line_error(capsys, argv: list[str], *fragments: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err


def subcommands() -> dict:
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def test_every_command_that_writes_declares_out_as_a_directory_or_names_its_file_flag():
    writers = {}
    for name, parser in subcommands().items():
        flags = {option: action for action in parser._actions for option in action.option_strings}
        if "--out" in flags or any(flag in flags for flag in FILE_FLAGS.values()):
            writers[name] = flags
    assert set(writers) == set(OUT_DIR_COMMANDS) | set(FILE_FLAGS)
    for name, flags in writers.items():
        if name in FILE_FLAGS:
            assert FILE_FLAGS[name] in flags and flags["--out"].help == "==SUPPRESS==", name  # hidden, refused
        else:
            assert "director" in flags["--out"].help or "folder" in flags["--out"].help, (name, flags["--out"].help)


@pytest.mark.parametrize("command", sorted(OUT_DIR_COMMANDS))
def test_out_naming_a_file_is_refused_in_one_line(capsys, tmp_path, command):
    existing = tmp_path / "a-file"
    existing.write_text("x")
    run = tmp_path / "run"
    run.mkdir()
    positional = [str(run) if p == "RUN" else p for p in POSITIONAL.get(command, [])]
    one_line_error(capsys, [command, *positional, "--out", str(existing)], str(existing), "is a file")
    assert existing.read_text() == "x"


@pytest.mark.parametrize("command", sorted(FILE_FLAGS))
def test_a_single_file_command_refuses_out_and_names_its_flag(capsys, tmp_path, command):
    positional = POSITIONAL.get(command, [])
    one_line_error(capsys, [command, *positional, "--out", str(tmp_path / "x")], FILE_FLAGS[command], "--out is a directory")


@pytest.mark.parametrize("command", sorted(FILE_FLAGS))
def test_a_single_file_flag_naming_a_directory_is_refused(capsys, tmp_path, command):
    positional = POSITIONAL.get(command, [])
    one_line_error(capsys, [command, *positional, FILE_FLAGS[command], str(tmp_path)], FILE_FLAGS[command], "is a directory")
