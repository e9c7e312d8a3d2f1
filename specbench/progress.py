"""Progress bars for the long phases (calibration's greedy pass and replays, the verify-cost profile,
distillation, training, a run's questions): one look for all of them, and a way to follow them without
a terminal.

Every phase is opened with `phase(name, total, unit)` and advanced with `Phase.update`. A bar shows the
phase's name, the count done of the total, the rate and the time left (tqdm's estimate), on stderr, so
stdout stays the command's result. Bars are drawn only when stderr is a terminal, the caller has not
turned them off (`--no-progress`, ``specbench.run(progress=False)``, `enabled(False)` around a block) and
``SPECBENCH_NO_PROGRESS`` is unset or empty; a log file or a pipe gets no carriage-return clutter.

Listeners (`listen`) are told of every update whether or not a bar is drawn: the tests follow a phase
that way, and a notebook or a service can show its own progress.
"""

from __future__ import annotations

import contextlib
import os
import sys
from contextvars import ContextVar
from typing import Callable, Iterable, Iterator, TypeVar

ENV_OFF = "SPECBENCH_NO_PROGRESS"
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}, {rate_fmt}]"

#: (phase name, done, total) after every update, and once with done = 0 when the phase opens
Listener = Callable[[str, int, int], None]

_enabled: ContextVar[bool] = ContextVar("specbench_progress_enabled", default=True)
_listeners: list[Listener] = []
T = TypeVar("T")


def bars_wanted(flag: bool | None = None) -> bool:
    """Whether a new phase draws a bar: ``flag`` (None: the enclosing `enabled` block's setting), stderr a
    terminal, and ``SPECBENCH_NO_PROGRESS`` not set."""
    wanted = _enabled.get() if flag is None else flag
    return bool(wanted) and not os.environ.get(ENV_OFF) and _is_terminal(sys.stderr)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


@contextlib.contextmanager
def enabled(flag: bool) -> Iterator[None]:
    """Phases opened inside draw bars only if ``flag`` (a command's ``--no-progress``, an API call's
    ``progress=``), without handing the flag down through every function that may open one."""
    token = _enabled.set(bool(flag) and _enabled.get())
    try:
        yield
    finally:
        _enabled.reset(token)


@contextlib.contextmanager
def listen(listener: Listener) -> Iterator[list[Listener]]:
    """Call ``listener(name, done, total)`` on every phase's updates inside the block."""
    _listeners.append(listener)
    try:
        yield _listeners
    finally:
        _listeners.remove(listener)


class Phase:
    """One long phase: a count of ``total`` ``unit``s, drawn as a bar when `bars_wanted`."""

    def __init__(self, name: str, total: int, unit: str = "it", show: bool | None = None) -> None:
        self.name, self.total, self.unit, self.done = name, int(total), unit, 0
        self._bar = None
        if bars_wanted(show):
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=name, unit=unit, file=sys.stderr, dynamic_ncols=True,
                             bar_format=BAR_FORMAT, leave=True)
        self._notify()

    def _notify(self) -> None:
        for listener in list(_listeners):
            listener(self.name, self.done, self.total)

    def update(self, n: int = 1, **postfix: object) -> None:
        """``n`` more units done; ``postfix`` (e.g. ``loss="2.31"``) is shown after the bar."""
        self.done += n
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(n)
        self._notify()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Phase":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def phase(name: str, total: int, unit: str = "it", show: bool | None = None) -> Phase:
    """Open a phase (use as a context manager, or call `Phase.close`)."""
    return Phase(name, total, unit, show)


def iterate(items: Iterable[T], name: str, total: int, unit: str = "it", show: bool | None = None) -> Iterator[T]:
    """``items``, counting each one as a unit of the phase ``name``."""
    with Phase(name, total, unit, show) as bar:
        for item in items:
            yield item
            bar.update(1)
