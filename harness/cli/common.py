"""What every command group of the ``specbench`` command shares: the parser classes (one-line errors, each
flag's default in its help), a command's declaration, exit codes, small flag types and the output flags.

Output flags mean one thing everywhere: ``--out DIR`` is always a directory the command writes into (run,
report, export, distill, convert); a command that writes a single file names its flag for it instead
(``profile --out-file``, ``replay --out-csv``, ``train --out-checkpoint``) and refuses ``--out`` with a
line saying which flag it takes."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specbench.errors import SpecbenchError
from specbench.harness.options import int_csv

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Command:
    """One subcommand: what bare ``specbench`` lists for it, its flags and what it does."""

    name: str
    about: str  # one line
    example: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise SpecbenchError(message)


class HelpFormatter(argparse.HelpFormatter):
    """Help text with each flag's default appended (unless the text already states it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        empty = action.default is None or action.default is False or action.default == [] \
            or action.default is argparse.SUPPRESS
        if "default" in text or empty or not action.option_strings:
            return text
        default = ",".join(map(str, action.default)) if isinstance(action.default, list) else action.default
        return f"{text} (default: {default})"


def tree_sizes(text: str, flag: str) -> list[int]:
    """``--sizes`` / ``--budgets``: distinct tree sizes (root included), sorted; a bad one stops with one line."""
    try:
        sizes = int_csv(text)
    except ValueError:
        raise SpecbenchError(f"{flag} must be comma-separated integers, got {text}") from None
    if not sizes or sizes[0] < 1:
        raise SpecbenchError(f"{flag} must be tree {flag.removeprefix('--')} of at least 1 (the root)")
    return sizes


def add_progress_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars (bars are drawn on stderr only when it is a terminal and "
                             "SPECBENCH_NO_PROGRESS is unset)")


#: the commands whose ``--out`` is a directory (the one meaning ``--out`` has)
OUT_DIR_COMMANDS = ("run", "report", "export", "distill", "convert")


def check_out_dir(path: str | None) -> Path | None:
    """``--out``: a directory the command writes into (made if missing); an existing file is refused."""
    if path is None:
        return None
    if path == "":
        raise SpecbenchError("--out must name a directory")
    if Path(path).exists() and not Path(path).is_dir():
        raise SpecbenchError(f"--out {path} is a file; --out is the directory the command writes into")
    return Path(path)


class _OutIsDirectoryElsewhere(argparse.Action):
    """``--out`` given to a command that writes one file: refused, naming the flag it takes."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise SpecbenchError(f"{parser.prog} writes one file: give {self.metavar} (--out is a directory, "
                             f"for {', '.join(OUT_DIR_COMMANDS)})")


def add_out_file(parser: argparse.ArgumentParser, flag: str, what: str, **kwargs) -> None:
    """The named output flag of a command that writes one file (``what`` says which), plus an ``--out``
    that is refused with a line naming ``flag``."""
    parser.add_argument(flag, default=None, help=what, **kwargs)
    usage = f"{flag} {kwargs.get('metavar', 'FILE')}"
    parser.add_argument("--out", action=_OutIsDirectoryElsewhere, help=argparse.SUPPRESS, metavar=usage,
                        default=argparse.SUPPRESS)  # no args.out: `given` would hand it to RunConfig


def check_out_file(path: str | None, flag: str, what: str = "file name") -> Path | None:
    """A single-file output flag's value: an existing directory (or an empty name) is refused."""
    if path is None:
        return None
    if path == "" or Path(path).is_dir():
        raise SpecbenchError(f"{flag} {path!r} is {'a directory' if path else 'empty'}; give a {what}")
    return Path(path)
