"""The house's floors: every module's imports point down, and no two modules import each other.

Floors, bottom up (a module may import its own floor and those below it):

0. ``core``: ``specbench/`` (types and the target: tree, drafter protocol, verify, sampling, kv, model,
   results, metrics, timing, errors, registry, questions, prompts);
1. ``drafters``: ``drafters/`` (``specbench.drafters``);
2. ``harness``: ``harness/`` (the loop, runner, tree-budget pipeline, sharding);
3. ``reports``: ``reports/``;
4. ``front``: the command line (``harness/cli``), the Python API (``harness/api``) and ``python -m specbench``.

The package's ``specbench/__init__`` is core: it imports nothing, and names its exports (the API's
``specbench.run`` among them) as strings imported on first use.

Every import counts: module level, inside functions and under ``TYPE_CHECKING`` (a cycle broken by a
late import is still a cycle). ``python tests/test_layers.py`` prints which package imports which.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: package name -> folder (pyproject.toml's package-dir)
FOLDERS = {"specbench": ROOT / "specbench", "specbench.drafters": ROOT / "drafters",
           "specbench.harness": ROOT / "harness", "specbench.reports": ROOT / "reports"}
FLOORS = ("core", "drafters", "harness", "reports", "front")
FRONT = ("specbench.__main__", "specbench.harness.cli", "specbench.harness.api")


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def floor(module: str) -> str:
    if any(module == front or module.startswith(front + ".") for front in FRONT):
        return "front"
    for name in ("drafters", "harness", "reports"):
        if module == f"specbench.{name}" or module.startswith(f"specbench.{name}."):
            return name
    return "core"


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports (anywhere in its file)."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import mod`` imports pkg.mod; ``from mod import name`` imports mod
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in known and name != module}
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a higher floor, as 'a (floor) -> b (floor)'."""
    rank = {name: i for i, name in enumerate(FLOORS)}
    return sorted(f"{a} ({floor(a)}) -> {b} ({floor(b)})" for a, targets in edges.items() for b in targets
                  if rank[floor(b)] > rank[floor(a)])


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def package_of(module: str) -> str:
    """The listing's unit: the floor, with the harness's subpackages and the front's pieces apart."""
    for name in ("specbench.harness.autobudget", "specbench.harness.cli", "specbench.harness.api",
                 "specbench.drafters.training"):
        if module == name or module.startswith(name + "."):
            return name.removeprefix("specbench.")
    return {"core": "specbench (core)"}.get(floor(module), floor(module) if floor(module) != "front" else module)


def listing(edges: dict[str, set[str]]) -> str:
    """Which package imports which, with the number of module pairs."""
    pairs = Counter((package_of(a), package_of(b)) for a, targets in edges.items() for b in targets
                    if package_of(a) != package_of(b))
    width = max(len(a) for a, _ in pairs)
    return "\n".join(f"{a:<{width}} -> {b} ({n})" for (a, b), n in sorted(pairs.items()))


def test_no_module_imports_a_higher_floor():
    found = upward(graph())
    assert found == [], "upward imports:\n" + "\n".join(found)


def test_no_import_cycles():
    found = cycles(graph())
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_check_catches_a_planted_upward_import_and_cycle(tmp_path):
    """The walk sees late imports: a core module importing the loop inside a function is upward, and two
    modules importing each other form one component."""
    edges = graph()
    edges["specbench.tree"] = edges["specbench.tree"] | {"specbench.harness.loop"}
    assert any(line.startswith("specbench.tree (core) -> specbench.harness.loop") for line in upward(edges))
    planted = tmp_path / "planted.py"
    planted.write_text("def late():\n    from specbench.harness import runner\n")
    assert imports("specbench.planted", planted, modules()) == {"specbench.harness.runner"}
    edges["specbench.harness.loop"] = edges["specbench.harness.loop"] | {"specbench.harness.runner"}
    assert ["specbench.harness.loop", "specbench.harness.runner"] in [
        [m for m in c if m in ("specbench.harness.loop", "specbench.harness.runner")] for c in cycles(edges)]


if __name__ == "__main__":
    edges = graph()
    print(listing(edges))
    print(f"\n{sum(map(len, edges.values()))} imports among {len(edges)} modules; "
          f"{len(upward(edges))} upward, {len(cycles(edges))} cycles")
