"""Options declared once: a config dataclass's field carries its help, default, parser and check, and the
command line, the Python API and resume's keys are derived from it.

A field declared with `option` is a command-line flag (``--max-new-tokens`` for ``max_new_tokens``, or
the ``flag`` given), an API keyword (the field's name), and, unless ``resume=False``, a setting that a
resumed run must share with the run it continues. Values given as text (the command line, or an API
caller passing ``"a,b"``) go through the option's ``parse``; every value goes through its ``check``.
Both raise `SpecbenchError` with a one-line message naming the flag. Adding an option is one edit: a
field in the config class.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from specbench.errors import SpecbenchError

Parse = Callable[[str], Any]
Check = Callable[[Any], "str | None"]  # None when the value is good, else what is wrong with it


@dataclass(frozen=True)
class Option:
    """How one config field appears outside the code (see the module docstring)."""

    help: str
    parse: Parse | None = None  # text -> value (None: the text itself)
    check: Check | None = None
    choices: tuple | None = None
    flag: str | None = None  # default: --field-name
    metavar: str | None = None
    resume: bool = True  # a resumed run must match it
    repeatable: bool = False  # the flag may be given several times; parse gets the list of texts

    def flag_of(self, name: str) -> str:
        return self.flag or "--" + name.replace("_", "-")


def option(default: Any, help: str, **how: Any) -> Any:
    """A dataclass field declared as an `Option` (``how``: Option's other fields). A list or dict default
    is copied per instance."""
    meta = {"option": Option(help, **how)}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def declared(config: type) -> dict[str, Option]:
    """The config class's options by field name, in declaration order."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(config) if "option" in f.metadata}


def resume_keys(config: type) -> tuple[str, ...]:
    """The settings a resumed run must share with the run it continues."""
    return tuple(name for name, opt in declared(config).items() if opt.resume)


# ---- parsers and checks, shared by declarations ------------------------------------------------------------
def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def csv(text: str) -> list[str]:
    """``a, b,c`` -> [a, b, c]."""
    return [item.strip() for item in text.split(",") if item.strip()]


def int_csv(text: str) -> list[int]:
    """``4,1,4`` -> [1, 4]: distinct integers, sorted (tree sizes, budgets)."""
    try:
        return sorted({int(item) for item in csv(text)})
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None


def literal(text: str) -> Any:
    """A Python literal when the text is one, else the text (``6`` -> 6, ``[1, 2]`` -> list, ``x`` -> 'x')."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def drafter_options(items: list[str]) -> dict[str, dict]:
    """Each item ``DRAFTER.OPTION=VALUE`` (the value parsed as a Python literal when it is one) or a JSON
    mapping of drafters to their options, merged in order: ``["ngram.max_depth=6", '{"hydra": {"tree":
    "static"}}']`` -> {"ngram": {"max_depth": 6}, "hydra": {"tree": "static"}}."""
    options: dict[str, dict] = {}
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                mapping = json.loads(item)
            except ValueError as error:
                raise ValueError(f"{item!r}: not a JSON mapping ({error})") from None
            if not all(isinstance(values, dict) for values in mapping.values()):
                raise ValueError(f"{item!r}: expected {{DRAFTER: {{OPTION: VALUE}}}}")
            for drafter, values in mapping.items():
                options.setdefault(drafter, {}).update(values)
            continue
        key, sep, raw = item.partition("=")
        drafter, dot, name = key.partition(".")
        if not (sep and dot and drafter and name):
            raise ValueError(f"{item!r}: expected DRAFTER.OPTION=VALUE or a JSON mapping")
        options.setdefault(drafter, {})[name] = literal(raw)
    return options


def at_least(low: int) -> Check:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        values = value if isinstance(value, list) else [value]
        return None if values and all(v >= low for v in values) else f"must be at least {low}, got {value}"

    return check


# ---- applying declarations ---------------------------------------------------------------------------------
#: what a value given as a Python object (the API) must be for an option parsed by these: (types, wording)
_NUMBERS = {integer: ((int,), "an integer"), number: ((int, float), "a number")}
_LISTS = {csv: (str, "comma-separated text or a list of strings"),
          int_csv: (int, "comma-separated integers or a list of integers")}
_TEXT = ("str", "str | None")  # the annotations of a text option


def _kind_problem(opt: Option, annotation: str, value: Any) -> str | None:
    """Why ``value``, given as a Python object rather than text, is not of the option's kind (None if it is):
    an API caller's ``drafters=5`` or ``seed=1.5`` stops with one line naming the option, not a TypeError
    deep in the run or a silent truncation."""
    if value is None:
        return None if "None" in annotation or opt.parse in _LISTS else "expected a value, got None"
    if opt.parse in _NUMBERS:
        kinds, wording = _NUMBERS[opt.parse]
        return None if isinstance(value, kinds) and not isinstance(value, bool) else f"expected {wording}, got {value!r}"
    if opt.parse in _LISTS:
        element, wording = _LISTS[opt.parse]
        good = isinstance(value, list) and all(isinstance(v, element) and not isinstance(v, bool) for v in value)
        return None if good else f"expected {wording}, got {value!r}"
    if annotation in _TEXT and not isinstance(value, str):
        return f"expected text, got {value!r}"
    return None


def normalise(config: Any) -> None:
    """Parse the options given as text and check every option, in place (a config's ``__post_init__``).
    A value given as a Python object must be of the option's kind (`_kind_problem`; a tuple counts as a list,
    one integer as a list of it, a path as text)."""
    annotations = {f.name: str(f.type) for f in dataclasses.fields(config)}
    for name, opt in declared(type(config)).items():
        value = getattr(config, name)
        texts = isinstance(value, list) and opt.repeatable and all(isinstance(v, str) for v in value)
        if opt.parse is not None and (isinstance(value, str) or texts):
            try:
                value = opt.parse(value)
            except (ValueError, TypeError) as error:
                raise SpecbenchError(f"{opt.flag_of(name)}: {error}") from None
        elif isinstance(value, tuple) and opt.parse in _LISTS:
            value = list(value)
        elif opt.parse is int_csv and isinstance(value, int) and not isinstance(value, bool):
            value = [value]  # batch_size=4 as batch_size=[4]
        elif isinstance(value, os.PathLike) and annotations[name] in _TEXT:
            value = os.fspath(value)
        problem = _kind_problem(opt, annotations[name], value)
        if problem:
            raise SpecbenchError(f"{opt.flag_of(name)}: {problem}")
        setattr(config, name, value)
        if opt.choices is not None and value is not None and value not in opt.choices:
            raise SpecbenchError(f"{opt.flag_of(name)} must be one of {', '.join(map(str, opt.choices))}, got {value!r}")
        problem = opt.check(value) if opt.check is not None else None
        if problem:
            raise SpecbenchError(f"{opt.flag_of(name)} {problem}")


def add_options(parser: argparse.ArgumentParser, config: type, names: tuple[str, ...] | None = None,
                explicit_only: bool = False) -> None:
    """Add the config's options (``names``, or every one) to ``parser``. Flags take text; the config parses
    it, so the command line and the API accept the same values. With ``explicit_only`` an option not given
    stays out of the parsed arguments (so a config file or preset can supply it: `given` returns only what
    was typed); otherwise it takes the config's default."""
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(config)}
    for name, opt in declared(config).items():
        if names is not None and name not in names:
            continue
        default = defaults[name]
        shown = "" if default in (None, [], {}, "", False) or "default" in opt.help else f" (default: {_text(default)})"
        common = {"dest": name, "help": opt.help + shown if explicit_only else opt.help,
                  "default": argparse.SUPPRESS if explicit_only or opt.repeatable else default}
        if isinstance(default, bool):
            parser.add_argument(opt.flag_of(name), action=argparse.BooleanOptionalAction, **common)
        elif opt.repeatable:  # never given: `given` leaves the config's default
            parser.add_argument(opt.flag_of(name), action="append", metavar=opt.metavar, **common)
        else:
            parser.add_argument(opt.flag_of(name), choices=opt.choices, metavar=opt.metavar, **common)


def given(args: argparse.Namespace, config: type) -> dict[str, Any]:
    """The config's options that ``args`` holds (a command adds some of them)."""
    return {name: getattr(args, name) for name in declared(config) if hasattr(args, name)}


def _text(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
