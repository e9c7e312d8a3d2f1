"""Drafter registry: one mechanism for built-ins and third-party drafters.

Drafters are found through the entry-point group ``specbench.drafters`` (``name = "pkg.module:Class"``)
and imported only when used; specbench declares its own built-ins there too, so every run exercises the
path a third-party package uses. ``@register_drafter("name")`` registers a class defined in a script or
notebook. A name may be registered once: duplicates are an error, whichever way they come.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Callable, TypeVar

from specbench.drafter import Drafter
from specbench.errors import DrafterOptionError, SpecbenchError

ENTRY_POINT_GROUP = "specbench.drafters"

D = TypeVar("D", bound=type[Drafter])


@dataclass(frozen=True)
class DrafterSource:
    """Where a registered name comes from: ``"module:Class"`` and the distribution or script."""

    target: str
    origin: str


_decorated: dict[str, type[Drafter]] = {}


def register_drafter(name: str) -> Callable[[D], D]:
    """Class decorator: make ``cls`` available as ``--drafters name``."""

    def decorate(cls: D) -> D:
        if not (isinstance(cls, type) and issubclass(cls, Drafter)):
            raise TypeError(f"@register_drafter({name!r}) must decorate a subclass of specbench.Drafter")
        target = f"{cls.__module__}:{cls.__qualname__}"
        known = _sources()
        if name in known and known[name].target != target:
            raise SpecbenchError(f"drafter name {name!r} is already registered by {known[name].target}")
        cls.name = name
        _decorated[name] = cls
        return cls

    return decorate


def _entry_point_sources() -> dict[str, DrafterSource]:
    found: dict[str, DrafterSource] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "unknown distribution"
        source = DrafterSource(ep.value, f"entry point of {dist}")
        if ep.name in found and found[ep.name].target != ep.value:
            raise SpecbenchError(
                f"drafter name {ep.name!r} is declared twice: {found[ep.name].target} "
                f"({found[ep.name].origin}) and {ep.value} ({dist})"
            )
        found[ep.name] = source
    return found


def _sources() -> dict[str, DrafterSource]:
    sources = _entry_point_sources()
    for name, cls in _decorated.items():
        sources.setdefault(name, DrafterSource(f"{cls.__module__}:{cls.__qualname__}", "@register_drafter"))
    return sources


def available_drafters() -> dict[str, DrafterSource]:
    """Every registered name and where it comes from, sorted by name."""
    return dict(sorted(_sources().items()))


def get_drafter_class(name: str) -> type[Drafter]:
    """The class registered as ``name``; imports its module on first use."""
    if name in _decorated:
        return _decorated[name]
    sources = _entry_point_sources()
    if name not in sources:
        known = ", ".join(available_drafters()) or "none"
        raise SpecbenchError(f"unknown drafter {name!r}; known drafters: {known}")
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            cls = ep.load()
        except (ImportError, AttributeError) as exc:
            raise SpecbenchError(f"drafter {name!r}: cannot load {ep.value}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Drafter)):
            raise SpecbenchError(f"drafter {name!r}: {ep.value} is not a subclass of specbench.Drafter")
        cls.name = name
        return cls
    raise AssertionError("unreachable")  # pragma: no cover


def create_drafter(name: str, **options) -> Drafter:
    """Instantiate the drafter registered as ``name`` with drafter-specific ``options``."""
    cls = get_drafter_class(name)
    try:
        return cls(**options)
    except DrafterOptionError as exc:
        raise DrafterOptionError(f"drafter {name!r}: {exc}") from None
    except (TypeError, ValueError) as exc:  # an unknown keyword or a wrong type, from any drafter
        raise DrafterOptionError(f"drafter {name!r}: {exc}") from None
