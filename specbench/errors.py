"""The one error type for bad input.

Anything the user can fix (unknown drafter, malformed question file, missing model, impossible settings)
raises `SpecbenchError` with a one-line message; the CLI prints it and exits with code 2. Everything else
is a bug and keeps its traceback.
"""


class SpecbenchError(Exception):
    """A problem with the user's input or settings, reported as one line and exit code 2."""


class DrafterOptionError(SpecbenchError):
    """A drafter option (``--drafter-option NAME.OPTION=VALUE``) that is unknown or out of range.

    Drafters, built-in or plug-in, raise it from ``__init__``; `specbench.registry.create_drafter` names
    the drafter in the message and also turns a ``TypeError`` or ``ValueError`` from the constructor (an
    unknown keyword, a wrong type) into it, so every bad option ends as one line and exit code 2."""
