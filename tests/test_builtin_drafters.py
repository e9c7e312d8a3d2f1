"""The nine built-in drafters, pinned by name.

Every exactness test (tests/test_lossless.py, tests/test_contract.py, tests/test_default_model.py, the
sampling tests) is parametrised over whatever the ``specbench.drafters`` entry points list, so a built-in
dropped from the packaging metadata would silently leave all of them. This module names the built-ins
and fails when one is missing from pyproject.toml, from the installed distribution's metadata (a stale
install) or from the registry, or is declared under another class.
"""

from __future__ import annotations

import re
from importlib.metadata import distribution
from pathlib import Path

import pytest

from specbench.drafter import Drafter
from specbench.registry import ENTRY_POINT_GROUP, available_drafters, get_drafter_class

ROOT = Path(__file__).resolve().parents[1]

#: name -> the class its entry point names.
BUILTINS = {
    "vanilla": "specbench.drafters.vanilla:VanillaDrafter",
    "ngram": "specbench.drafters.ngram:NgramDrafter",
    "medusa": "specbench.drafters.medusa:MedusaDrafter",
    "hydra": "specbench.drafters.hydra:HydraDrafter",
    "ctc": "specbench.drafters.ctc:CTCDrafter",
    "ctc-ce": "specbench.drafters.ctc:CTCCrossEntropyDrafter",
    "eagle": "specbench.drafters.eagle:EagleDrafter",
    "eagle3": "specbench.drafters.eagle3:Eagle3Drafter",
    "sps": "specbench.drafters.sps:SpSDrafter",
}


def test_there_are_nine_builtins():
    assert len(BUILTINS) == 9


def declared_in_pyproject() -> dict[str, str]:
    """The ``[project.entry-points."specbench.drafters"]`` table of pyproject.toml (read with a regular
    expression: tomllib is Python 3.11+, specbench supports 3.10)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    table = re.search(r'^\[project\.entry-points\."specbench\.drafters"\]\n(.*?)(?=^\[|\Z)', text, flags=re.S | re.M)
    assert table, "pyproject.toml has no specbench.drafters entry-point table"
    return dict(re.findall(r'^"?([\w.-]+)"?\s*=\s*"([^"]+)"', table.group(1), flags=re.M))


def test_pyproject_declares_exactly_the_builtins():
    assert declared_in_pyproject() == BUILTINS


def test_installed_metadata_declares_exactly_the_builtins():
    """The metadata the registry really reads (pip install -e . writes it): a reinstall is due when this fails."""
    installed = {ep.name: ep.value for ep in distribution("specbench").entry_points if ep.group == ENTRY_POINT_GROUP}
    assert installed == BUILTINS


def test_registry_lists_every_builtin_from_specbench():
    sources = available_drafters()
    missing = sorted(set(BUILTINS) - set(sources))
    assert not missing, f"built-in drafters missing from the registry: {missing}"
    for name, target in BUILTINS.items():
        assert sources[name].target == target
        assert sources[name].origin == "entry point of specbench"


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_loads_under_its_name(name):
    cls = get_drafter_class(name)
    assert issubclass(cls, Drafter) and cls.name == name
    assert f"{cls.__module__}:{cls.__qualname__}" == BUILTINS[name]
