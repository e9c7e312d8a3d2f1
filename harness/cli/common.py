"""What every command group of the ``specbench`` command shares: the parser classes (one-line errors, each
flag's default in its help), a command's declaration, exit codes and small flag types."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
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
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
