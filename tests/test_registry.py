"""The drafter registry: built-ins come through the entry-point group like any third-party drafter;
``@register_drafter`` adds script-defined classes; unknown and duplicate names are one-line errors."""

from __future__ import annotations

import pytest

import specbench.registry as registry
from specbench import Drafter, SpecbenchError, available_drafters, create_drafter, get_drafter_class, register_drafter
from specbench.drafters.ngram import NgramDrafter
from specbench.drafters.vanilla import VanillaDrafter


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch):
    """Registry state is module-global: give each test its own copy of the decorated names."""
    monkeypatch.setattr(registry, "_decorated", dict(registry._decorated))


@pytest.mark.parametrize(
    "name, target",
    [("vanilla", "specbench.drafters.vanilla:VanillaDrafter"), ("ngram", "specbench.drafters.ngram:NgramDrafter")],
)
def test_builtins_come_from_entry_points(name, target):
    sources = available_drafters()
    assert sources[name].target == target
    assert sources[name].origin.startswith("entry point of ")
    assert "specbench" in sources[name].origin


def test_available_drafters_is_sorted():
    names = list(available_drafters())
    assert names == sorted(names)


def test_get_drafter_class_loads_builtins():
    assert get_drafter_class("vanilla") is VanillaDrafter
    assert get_drafter_class("ngram") is NgramDrafter
    assert VanillaDrafter.name == "vanilla" and NgramDrafter.name == "ngram"
    assert isinstance(create_drafter("vanilla"), VanillaDrafter)
    assert create_drafter("ngram", max_depth=4).max_depth == 4


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(SpecbenchError) as info:
        get_drafter_class("no-such-drafter")
    message = str(info.value)
    assert "unknown drafter 'no-such-drafter'" in message
    for name in available_drafters():
        assert name in message
    assert "\n" not in message
    with pytest.raises(SpecbenchError, match="unknown drafter"):
        create_drafter("no-such-drafter")


def test_bad_options_are_a_specbench_error():
    with pytest.raises(SpecbenchError, match="drafter 'vanilla'.*takes no options.*depth"):
        create_drafter("vanilla", depth=3)
    with pytest.raises(SpecbenchError, match="drafter 'ngram'"):
        create_drafter("ngram", no_such_option=1)
    with pytest.raises(SpecbenchError, match="min_ngram"):
        create_drafter("ngram", min_ngram=3, max_ngram=2)


def test_register_drafter_decorator():
    @register_drafter("test-echo")
    class Echo(Drafter):
        pass

    assert Echo.name == "test-echo"
    assert get_drafter_class("test-echo") is Echo
    assert isinstance(create_drafter("test-echo"), Echo)
    source = available_drafters()["test-echo"]
    assert source.origin == "@register_drafter"
    assert source.target == f"{__name__}:test_register_drafter_decorator.<locals>.Echo"
    # The built-ins are still there.
    assert {"vanilla", "ngram", "test-echo"} <= set(available_drafters())


def test_decorated_names_do_not_leak_between_tests():
    assert "test-echo" not in available_drafters()


def test_reregistering_the_same_class_is_allowed():
    class Same(Drafter):
        pass

    assert register_drafter("test-same")(Same) is Same
    assert register_drafter("test-same")(Same) is Same
    assert get_drafter_class("test-same") is Same


def test_duplicate_of_an_entry_point_name_is_an_error():
    class OtherNgram(Drafter):
        pass

    with pytest.raises(SpecbenchError, match="'ngram' is already registered by specbench.drafters.ngram:NgramDrafter"):
        register_drafter("ngram")(OtherNgram)
    assert get_drafter_class("ngram") is NgramDrafter
    assert OtherNgram.name == ""


def test_duplicate_of_a_decorated_name_is_an_error():
    @register_drafter("test-dup")
    class First(Drafter):
        pass

    class Second(Drafter):
        pass

    with pytest.raises(SpecbenchError, match="'test-dup' is already registered by .*First"):
        register_drafter("test-dup")(Second)
    assert get_drafter_class("test-dup") is First


@pytest.mark.parametrize("thing", [object, int, lambda: None, "not a class", VanillaDrafter()])
def test_decorating_a_non_drafter_is_a_type_error(thing):
    with pytest.raises(TypeError, match="subclass of specbench.Drafter"):
        register_drafter("test-bad")(thing)
    assert "test-bad" not in available_drafters()
