"""The one error type for bad input.

Anything the user can fix (unknown drafter, malformed question file, missing model, impossible settings)
raises `SpecbenchError` with a one-line message; the CLI prints it and exits with code 2. Everything else
is a bug and keeps its traceback.
"""


class SpecbenchError(Exception):
    """A problem with the user's input or settings, reported as one line and exit code 2."""
