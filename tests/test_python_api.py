"""The Python API: docs/python-api.ipynb runs top to bottom on the default model (its DataFrames are
printed, so the test log shows them), and `specbench.run`'s own input checks."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pandas as pd
import pytest

import specbench
from specbench.errors import SpecbenchError

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "python-api.ipynb"


def run_notebook(path: Path) -> dict:
    """Execute every code cell in one namespace, printing each cell's last expression as Jupyter shows it."""
    namespace: dict = {"__name__": "__notebook__"}
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    for number, cell in enumerate(cells, start=1):
        tree = ast.parse("".join(cell["source"]))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, f"<cell {number}>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), f"<cell {number}>", "eval"), namespace)
            print(f"--- cell {number} ---\n{value}")
            namespace[f"_cell{number}"] = value
    return namespace


@pytest.mark.slow
def test_the_notebook_runs_and_its_tables_are_right(default_model_available, capsys):
    namespace = run_notebook(NOTEBOOK)
    summary = namespace["result"].summary
    assert isinstance(summary, pd.DataFrame)
    overall = summary[summary["category"] == "overall"].set_index("drafter")
    assert list(overall.index) == ["vanilla", "ngram", "hydra"]
    assert (overall.loc[["ngram", "hydra"], "equal_to_vanilla"] == 1.0).all()
    assert overall["verify_share"].notna().all()  # stage times are recorded in the timed run
    assert pd.read_csv(namespace["workdir"] / "demo" / "summary.csv").shape == summary.shape
    in_memory = namespace["in_memory"]
    assert in_memory.manifest["model"]["in_memory"] is True
    hydra = in_memory.summary.set_index(["drafter", "category"]).loc[("hydra", "overall")]
    assert hydra["equal_to_vanilla"] == 1.0 and hydra["tau"] > 1.0  # the shipped checkpoint was accepted
    assert "report.md" in namespace["_cell4"]
    with capsys.disabled():
        print("\n" + str(summary[["drafter", "category", "tau", "speedup", "equal_to_vanilla"]]))


def test_run_rejects_unknown_options_and_mixed_arguments(tmp_path):
    with pytest.raises(SpecbenchError, match="unknown run option.*max_tokens"):
        specbench.run(drafters="vanilla", max_tokens=3, out=tmp_path / "a")
    with pytest.raises(SpecbenchError, match="either a RunConfig or keyword options"):
        specbench.run(specbench.RunConfig(out=str(tmp_path / "b")), limit=1)
    with pytest.raises(SpecbenchError, match="needs its tokenizer"):
        specbench.run(model=object(), out=tmp_path / "c")


def test_load_refuses_what_is_not_a_run(tmp_path):
    with pytest.raises(SpecbenchError, match="not a specbench run directory"):
        specbench.load(tmp_path)
