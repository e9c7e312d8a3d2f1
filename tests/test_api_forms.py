"""Every form of ``specbench.run(model=...)`` that its docstring and the README give, end to end: a name
("default"), a path (a model directory, the default model's .gguf file), a `TargetModel`, and a Hugging
Face causal LM with its tokenizer. The in-memory forms and the directory use a tiny random Llama with the
default model's tokenizer (fast); the name and the .gguf file load the real default model (slow: one
question, 8 tokens)."""

from __future__ import annotations

import pandas as pd
import pytest

import specbench
from specbench.model import TargetModel

pytestmark = pytest.mark.usefixtures("single_thread")

SHORT = dict(drafters=["vanilla", "ngram"], bench="demo", categories="math", limit=1, max_new_tokens=8, tree_budget=4)


def check_result(result, out, *, in_memory: bool, model_name: str | None = None) -> None:
    """Both drafters answered the one question, ngram equal to vanilla; the files are in ``out``."""
    assert result.path == out
    assert set(result.answers) == {"vanilla", "ngram"}
    assert all(len(records) == 1 for records in result.answers.values())
    summary = result.summary
    assert isinstance(summary, pd.DataFrame)
    overall = summary[summary["category"] == "overall"].set_index("drafter")
    assert list(overall.index) == ["vanilla", "ngram"] and overall.loc["ngram", "equal_to_vanilla"] == 1.0
    assert pd.read_csv(out / "summary.csv").shape == summary.shape
    manifest = result.manifest
    assert bool(manifest["model"].get("in_memory")) is in_memory
    if model_name is not None:
        assert model_name in manifest["model"]["name"]


@pytest.fixture(scope="module")
def tiny_hf(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype="float32").eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


def test_a_model_directory_path(tiny_model_dir, tmp_path):
    result = specbench.run(model=tiny_model_dir, out=tmp_path / "run", **SHORT)
    check_result(result, tmp_path / "run", in_memory=False, model_name=tiny_model_dir.name)
    again = specbench.run(model=str(tiny_model_dir), out=tmp_path / "as-text", **SHORT)  # a str path as well
    assert again.answers["vanilla"][0].output_ids == result.answers["vanilla"][0].output_ids


def test_a_hugging_face_model_with_its_tokenizer(tiny_hf, tiny_model_dir, tmp_path):
    model, tokenizer = tiny_hf
    result = specbench.run(model=model, tokenizer=tokenizer, out=tmp_path / "run", **SHORT)
    check_result(result, tmp_path / "run", in_memory=True)
    from_disk = specbench.run(model=tiny_model_dir, out=tmp_path / "disk", **SHORT)
    assert result.answers["vanilla"][0].output_ids == from_disk.answers["vanilla"][0].output_ids


def test_a_target_model(tiny_hf, tmp_path):
    model, tokenizer = tiny_hf
    result = specbench.run(model=TargetModel(model, tokenizer), out=tmp_path / "run", **SHORT)
    check_result(result, tmp_path / "run", in_memory=True)


def test_a_compiled_run_records_what_its_warm_up_compiled(tiny_hf, tmp_path):
    """The compiled regime through the API: ids as in the eager run, and the manifest says what each compiled
    function's first call cost (`TargetModel.compile_seconds`: a GPU lease's warm-up is its biggest cost)."""
    model, tokenizer = tiny_hf
    eager = specbench.run(model=model, tokenizer=tokenizer, out=tmp_path / "eager", **SHORT)
    compiled = specbench.run(model=model, tokenizer=tokenizer, out=tmp_path / "compiled", regime="compiled", **SHORT)
    check_result(compiled, tmp_path / "compiled", in_memory=True)
    for name in ("vanilla", "ngram"):
        assert compiled.answers[name][0].output_ids == eager.answers[name][0].output_ids
    seconds = compiled.manifest["regime"]["compile_seconds"]
    assert {"tree step, bucket 1", "tree step, bucket 4"} <= set(seconds) and all(s > 0 for s in seconds.values())
    assert "compile_seconds" not in eager.manifest.get("regime", {})


@pytest.mark.slow
def test_the_default_model_by_name_as_the_docstring_gives_it(default_model_available, tmp_path):
    """The issue's call (mt_bench, one question of one category, 8 tokens, a fixed budget so that no
    calibration runs)."""
    out = tmp_path / "run"
    result = specbench.run(model="default", drafters=["vanilla", "ngram"], bench="mt_bench", categories="writing",
                           limit=1, max_new_tokens=8, tree_budget=4, out=out)
    assert all(len(r.output_ids) == 2 for r in result.answers["vanilla"])  # both MT-bench turns
    overall = result.summary.set_index(["drafter", "category"]).loc[("ngram", "overall")]
    assert overall["equal_to_vanilla"] == 1.0
    assert result.manifest["config"]["model"] == "default" and not result.manifest["model"].get("in_memory")


@pytest.mark.slow
def test_the_default_model_as_a_gguf_path(default_model_available, tmp_path):
    from specbench.model_source import default_model_file

    gguf = default_model_file()
    result = specbench.run(model=gguf, out=tmp_path / "run", **SHORT)
    check_result(result, tmp_path / "run", in_memory=False, model_name=gguf.stem)
    assert result.manifest["config"]["model"] == str(gguf)
