"""A third-party drafter package, installed with pip, is found through the ``specbench.drafters`` entry
point with no change to specbench: the registry lists it with its distribution as origin, loads it,
and it returns valid trees; ``specbench list-drafters`` shows it. The example in docs/writing-a-drafter.md
is byte-identical to the fixture package, so the guide's code is the code these tests run.

The fixture (tests/fixtures/repeat_last_pkg) is copied to a temporary folder and pip-installed from there
into a folder of its own (``--target``, ``--no-deps --no-build-isolation``: no network) that only this
module's subprocesses see on their ``PYTHONPATH``: the shared environment is never changed, so tests running
beside these (xdist) never see the plugin.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "repeat_last_pkg"
MODULE = FIXTURE / "repeat_last_drafter.py"
PYPROJECT = FIXTURE / "pyproject.toml"
GUIDE = ROOT / "docs" / "writing-a-drafter.md"
DIST = "specbench-repeat-last"
NAME = "repeat-last"


def _normalize(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)


_SITE: dict[str, Path] = {}  # "dir": the folder the fixture package is installed into, once `installed` ran


def _env() -> dict[str, str]:
    """This environment with the fixture's install folder first on ``PYTHONPATH`` (its entry point included)."""
    paths = [str(_SITE["dir"]), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter of this environment (so entry points are read anew)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=FIXTURE.parent,
                          env=_env())


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The fixture package, pip-installed from a copy (the build leaves build/ and *.egg-info behind) into a folder
    of its own."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "repeat_last_pkg"
    shutil.copytree(FIXTURE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    result = _pip("install", "--no-deps", "--no-build-isolation", "-q", "--target", str(root / "site"), str(source))
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    _SITE["dir"] = root / "site"
    yield DIST


# ---- the guide shows exactly the fixture's code ---------------------------------------------------------


def _guide_block(first_line: str) -> str:
    """The fenced code block of the guide whose first line is ``first_line``."""
    text = GUIDE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```$", text, flags=re.S | re.M)
    matches = [block for block in blocks if block.split("\n", 1)[0] == first_line]
    assert len(matches) == 1, f"{GUIDE.name}: expected one code block starting with {first_line!r}, found {len(matches)}"
    return matches[0]


@pytest.mark.parametrize("path", [MODULE, PYPROJECT], ids=lambda p: p.name)
def test_guide_code_equals_fixture(path):
    source = path.read_text(encoding="utf-8")
    first_line = source.split("\n", 1)[0]
    assert first_line == f"# {path.name}", f"{path} must start with the marker line '# {path.name}'"
    assert _guide_block(first_line) == source, f"the code block '{first_line}' in {GUIDE} differs from {path}"


# ---- the installed package, seen through the registry ------------------------------------------------------


def test_installed_package_is_registered_and_proposes_valid_trees(installed):
    code = textwrap.dedent(
        f"""
        import contextlib, json
        import torch
        import specbench
        from specbench import DraftContext, SpecbenchError

        sources = specbench.available_drafters()
        source = sources[{NAME!r}]
        cls = specbench.get_drafter_class({NAME!r})

        def ctx(budget):
            tokens = torch.tensor([5, 9, 9, 12, 7], dtype=torch.long)
            return DraftContext(tokens=tokens, root=int(tokens[-1]), hidden=torch.zeros(1, 8), target=None,
                                budget=budget, span=lambda name: contextlib.nullcontext())

        trees = {{}}
        for label, options, budget in [("default", {{}}, 8), ("k2", {{"k": 2}}, 8), ("k20", {{"k": 20}}, 8),
                                       ("budget1", {{}}, 1)]:
            drafter = specbench.create_drafter({NAME!r}, **options)
            drafter.reset(None)
            tree = drafter.propose(ctx(budget))
            tree.validate(7, budget)
            trees[label] = [tree.tokens.tolist(), tree.parents.tolist()]
        try:
            specbench.create_drafter({NAME!r}, depth=3)
            bad_option = None
        except SpecbenchError as exc:
            bad_option = str(exc)
        print(json.dumps({{"target": source.target, "origin": source.origin, "class": cls.__name__,
                          "module": cls.__module__, "name": cls.name, "builtins": sorted(sources),
                          "trees": trees, "bad_option": bad_option}}))
        """
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["target"] == "repeat_last_drafter:RepeatLastDrafter"
    origin = report["origin"]
    assert origin.startswith("entry point of ") and _normalize(origin.removeprefix("entry point of ")) == DIST, origin
    assert (report["class"], report["module"], report["name"]) == ("RepeatLastDrafter", "repeat_last_drafter", NAME)
    assert {"vanilla", "ngram", NAME} <= set(report["builtins"])
    trees = report["trees"]
    assert trees["default"] == [[7] * 5, [-1, 0, 1, 2, 3]]  # k = 4: a chain of four copies after the root
    assert trees["k2"] == [[7] * 3, [-1, 0, 1]]
    assert trees["k20"] == [[7] * 8, list(range(-1, 7))]  # cut to the budget, root included
    assert trees["budget1"] == [[7], [-1]]
    assert report["bad_option"] and "depth" in report["bad_option"]


def _specbench_command(how: str) -> list[str]:
    """One of the two ways this environment runs the CLI: the ``specbench`` console script that installing
    specbench puts in the environment's scripts folder (``.venv/bin`` after scripts/install.sh, found
    from this interpreter, not from PATH), or ``python -m specbench``."""
    if how == "module":
        return [sys.executable, "-m", "specbench"]
    scripts = Path(sysconfig.get_path("scripts"))
    script = shutil.which("specbench", path=str(scripts)) or shutil.which("specbench", path=str(Path(sys.executable).parent))
    assert script is not None, f"no `specbench` console script in {scripts}: specbench is not installed in this environment"
    return [script]


@pytest.mark.parametrize("how", ["script", "module"])
def test_list_drafters_shows_the_installed_package(installed, how):
    command = _specbench_command(how)
    result = subprocess.run([*command, "list-drafters"], capture_output=True, text=True, timeout=120, cwd=FIXTURE.parent,
                            env=_env())
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert NAME in lines, result.stdout
    assert "repeat_last_drafter:RepeatLastDrafter" in lines[NAME]
    from test_builtin_drafters import BUILTINS

    assert set(BUILTINS) | {NAME} <= set(lines), result.stdout


# ---- the example drafter through the real decode loop: lossless ---------------------------------------------


def _load_fixture_module():
    spec = importlib.util.spec_from_file_location("repeat_last_drafter_under_test", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("k", [1, 4])
def test_example_drafter_is_lossless_on_a_tiny_model(llama_target, k):
    from conftest import PROMPTS, plain_greedy
    from specbench.harness.loop import generate

    drafter = _load_fixture_module().RepeatLastDrafter(k=k)
    for prompt in PROMPTS:
        result = generate(llama_target, drafter, prompt, max_new_tokens=24, budget=8)
        assert result.output_ids == plain_greedy(llama_target.model, prompt, 24, llama_target.eos_ids)
        assert all(1 <= step.accepted <= k + 1 and step.nodes == k + 1 for step in result.steps)
