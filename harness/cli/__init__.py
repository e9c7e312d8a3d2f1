"""The ``specbench`` command (also ``python -m specbench``), one module per command group: `run` (run,
profile, replay), `results` (report, export, list-drafters), `attribute` (attribute) and `train` (distill,
train, convert).

Bad input prints one line, ``specbench: error: ...``, and exits with code 2; Ctrl-C keeps every
finished question and exits with code 130 (continue with ``--resume``). ``specbench`` alone and
``specbench -h`` list the commands with an example each; every flag's help shows its default.
"""

from __future__ import annotations

import argparse
import os
import sys

from specbench.errors import SpecbenchError
from specbench.harness.cli import attribute, results, run, train
from specbench.harness.cli.common import EXIT_USAGE, HelpFormatter, Parser

#: every command, in the order bare `specbench` lists them
COMMANDS = [*run.COMMANDS[:1], *results.COMMANDS[:2], *attribute.COMMANDS, *run.COMMANDS[1:], results.COMMANDS[2],
            *train.COMMANDS]


def overview() -> str:
    """The top-level help: every command with a one-line description and an example."""
    from specbench import __version__

    width = max(len(command.name) for command in COMMANDS)
    lines = [f"specbench {__version__}: benchmark speculative-decoding drafters on one shared verifier.", "",
             "usage: specbench [-h] [--version] COMMAND [options]   (specbench COMMAND -h for its options)", "",
             "commands:"]
    lines += [f"  {command.name:<{width}}  {command.about}" for command in COMMANDS]
    lines += ["", "examples:"] + [f"  {command.example}" for command in COMMANDS]
    lines += ["", "Docs: README.md and docs/ (python-api.ipynb for the Python API)."]
    return "\n".join(lines) + "\n"


class _TopParser(Parser):
    def format_help(self) -> str:
        return overview()


def build_parser() -> argparse.ArgumentParser:
    from specbench import __version__

    parser = _TopParser(prog="specbench", description="Benchmark speculative-decoding drafters on one shared verifier.")
    parser.add_argument("--version", action="version", version=f"specbench {__version__}")
    subparsers = parser.add_subparsers(dest="command", parser_class=Parser)
    for command in COMMANDS:
        sub = subparsers.add_parser(command.name, help=command.about, description=command.about,
                                    formatter_class=HelpFormatter, epilog=f"example: {command.example}")
        command.add_arguments(sub)
        sub.set_defaults(handler=command.handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:  # bare `specbench`: the overview, as -h
            print(overview(), end="")
            return 0
        if "SPECBENCH_LINEAR" in os.environ:  # a bad value stops here, before a model loads (specbench.linear)
            from specbench.linear import kernel_setting

            kernel_setting()
        return args.handler(args)
    except SpecbenchError as exc:
        print(f"specbench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader stopped early (``specbench report RUN | head``): what it read is all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush has nowhere to fail
        return 1


if __name__ == "__main__":
    sys.exit(main())
