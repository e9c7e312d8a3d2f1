"""``specbench.reports.export``: Spec-Bench answer files, checked against an independent re-implementation
of Spec-Bench's ``evaluation/speed.py`` and ``evaluation/equal.py`` (written here from docs/spec-bench.md,
not copied), and against specbench's own ``summary.csv`` figures.

Two runs: the synthetic MT-bench run of test_report (`write_mt_run`: 3 drafters, 16 questions, exact
numbers), and a real run of the runner on the tiny random Llama of conftest with a small character-level
BPE tokenizer built here, whose decode -> re-encode round trip merges characters, so Spec-Bench's
re-counted baseline tokens differ from the ids specbench counted.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import EOS, VOCAB, build_tiny_model
from specbench import metrics
from specbench.errors import SpecbenchError
from specbench.harness.runner import Run, RunConfig
from specbench.model import TargetModel
from specbench.reports.export import export_spec_bench, spec_bench_model_id, spec_bench_tokenizer
from specbench.reports.summary import summarize
from specbench.results import load_run
from test_report import write_mt_run  # the synthetic MT-bench run (tests/ is on sys.path under pytest)

# Spec-Bench's answer line, exactly (evaluation/eval.py, get_model_answers).
TOP_KEYS = {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
CHOICE_KEYS = {"index", "turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths"}
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
SPEC_BENCH_TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag", "overall")


# ---- Spec-Bench's formulas, re-implemented --------------------------------------------------------------
def read_lines(path: Path, task: str) -> list[dict]:
    """The lines speed.py keeps for ``task``: all ('overall'), the 8 MT-bench categories, or one category."""
    lines = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
    if task == "overall":
        return lines
    if task == "mt_bench":
        return [line for line in lines if line["category"] in MT_BENCH]
    return [line for line in lines if line["category"] == task]


def ids_count(line: dict) -> int:
    """A line's new tokens as specbench counts them: the recorded ids, EOS included."""
    return sum(line["choices"][0]["new_tokens"])


def retokenised_count(tokenizer):
    """speed.py's baseline count: every answer text tokenised again, minus one (its BOS) per turn."""
    def count(line: dict) -> int:
        return sum(len(tokenizer(text).input_ids) - 1 for text in line["choices"][0]["turns"])
    return count


def spec_bench_speed(method: Path, base: Path, task: str, base_count) -> dict:
    """speed.py's figures: mean accepted tokens over every step of every kept line of the method file, and
    the ratio of the two files' *mean per-question throughputs* (each file averaged on its own).
    Method tokens come from ``new_tokens``; baseline tokens from ``base_count`` (speed.py: re-tokenised)."""
    mine, theirs = read_lines(method, task), read_lines(base, task)
    throughput = [ids_count(line) / sum(line["choices"][0]["wall_time"]) for line in mine]
    base_throughput = [base_count(line) / sum(line["choices"][0]["wall_time"]) for line in theirs]
    lengths = [n for line in mine for n in line["choices"][0]["accept_lengths"]]
    return {"tau": float(np.mean(lengths)), "speedup": float(np.mean(throughput) / np.mean(base_throughput)),
            "base_tokens": sum(base_count(line) for line in theirs)}


def spec_bench_equal(first: Path, second: Path) -> bool:
    """equal.py's verdict: ``str(turns)`` of each line, compared line by line (zip: extra lines ignored)."""
    def texts(path: Path) -> list[str]:
        return [str(json.loads(text)["choices"][0]["turns"]) for text in path.read_text(encoding="utf-8").splitlines()]
    return all(a == b for a, b in zip(texts(first), texts(second)))


def file_of(paths: list[Path], drafter: str) -> Path:
    """The exported file of ``drafter`` (``<model>-<drafter>-<dtype>-temp-0.0.jsonl``)."""
    (path,) = [path for path in paths if f"-{drafter}-" in path.name]
    return path


def summary_row(summary, drafter: str, category: str):
    rows = summary[(summary["drafter"] == drafter) & (summary["category"] == category)]
    assert len(rows) == 1, (drafter, category)
    return rows.iloc[0]


# ---- the synthetic MT-bench run ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mt_export(tmp_path_factory) -> tuple[Path, list[Path]]:
    run = write_mt_run(tmp_path_factory.mktemp("mt") / "run")
    return run, export_spec_bench(run, tmp_path_factory.mktemp("spec-bench"))


@pytest.fixture(scope="module")
def mt_summary(mt_export):
    """specbench's summary.csv table of the synthetic run (computed once: its bootstrap is slow)."""
    return summarize(load_run(mt_export[0]))


def test_files_are_named_and_shaped_like_spec_bench(mt_export):
    run, paths = mt_export
    names = [path.name for path in paths]
    order = list(load_run(run))  # the run's order, vanilla first
    assert order[0] == "vanilla" and sorted(order) == ["chain", "ngram", "vanilla"]
    assert names == [f"tiny-llama-{d}-float32-temp-0.0.jsonl" for d in order]
    assert spec_bench_model_id("vicuna-7b-v1.3", "vanilla", "float16") == "vicuna-7b-v1.3-vanilla-float16-temp-0.0"
    assert all(path.parent.parts[-2:] == ("mt_bench", "model_answer") for path in paths)
    for drafter, path in zip(order, paths):
        lines = [json.loads(text) for text in path.read_text().splitlines()]
        source = [json.loads(text) for text in (run / "answers" / f"{drafter}.jsonl").read_text().splitlines()]
        assert [line["question_id"] for line in lines] == sorted(r["question_id"] for r in source)
        by_id = {r["question_id"]: r for r in source}
        for line in lines:
            assert set(line) == TOP_KEYS and set(line["choices"][0]) == CHOICE_KEYS
            assert line["model_id"] == path.stem
            original = by_id[line["question_id"]]
            assert line["category"] == original["category"]
            for key in CHOICE_KEYS:
                assert line["choices"][0][key] == original["choices"][0][key]


@pytest.mark.parametrize("task", ["overall", "mt_bench", *MT_BENCH])
@pytest.mark.parametrize("drafter", ["ngram", "chain"])
def test_spec_bench_formulas_agree_with_the_summary(mt_export, mt_summary, drafter, task):
    """Mean accepted tokens = tau exactly; with the baseline counted from ids, speed.py's speedup is
    specbench's speedup_mean_throughput (not the headline totals speedup)."""
    _, paths = mt_export
    row = summary_row(mt_summary, drafter, "overall" if task in ("overall", "mt_bench") else task)
    method = file_of(paths, drafter)
    figures = spec_bench_speed(method, paths[0], task, ids_count)
    assert figures["tau"] == row["tau"]
    assert figures["speedup"] == pytest.approx(row["speedup_mean_throughput"], rel=1e-12)
    assert figures["speedup"] != pytest.approx(row["speedup"], rel=1e-6)  # a different estimator


def test_retokenised_baseline_changes_only_the_token_count(mt_export, mt_summary):
    """speed.py's own count (text re-tokenised) gives another speedup, and it is exactly specbench's
    mean-throughput formula fed those baseline counts: the token count is the only difference."""
    _, paths = mt_export
    count = retokenised_count(lambda text: SimpleNamespace(input_ids=["<s>", *text.split()]))  # BOS + words
    figures = spec_bench_speed(file_of(paths, "ngram"), paths[0], "overall", count)
    base = [json.loads(t) for t in paths[0].read_text().splitlines()]
    mine = [json.loads(t) for t in file_of(paths, "ngram").read_text().splitlines()]
    assert [b["question_id"] for b in base] == [m["question_id"] for m in mine]
    expected = metrics.mean_throughput_speedup(
        [sum(b["choices"][0]["wall_time"]) for b in base], [count(b) for b in base],
        [sum(m["choices"][0]["wall_time"]) for m in mine], [ids_count(m) for m in mine])
    assert figures["speedup"] == pytest.approx(expected, rel=1e-12)
    assert figures["speedup"] != pytest.approx(summary_row(mt_summary, "ngram", "overall")["speedup_mean_throughput"])


def test_every_spec_bench_task_is_readable(mt_export):
    """get_single_speedup loops over Spec-Bench's 7 tasks; on an MT-bench export the 5 others are empty."""
    _, paths = mt_export
    for task in SPEC_BENCH_TASKS:
        assert len(read_lines(file_of(paths, "ngram"), task)) == (16 if task in ("mt_bench", "overall") else 0)


def test_drafter_subset_always_includes_the_baseline(mt_export, tmp_path):
    run, _ = mt_export
    paths = export_spec_bench(run, tmp_path, ["chain"], model="m", dtype="float16", bench="custom")
    assert [p.name for p in paths] == ["m-vanilla-float16-temp-0.0.jsonl", "m-chain-float16-temp-0.0.jsonl"]
    assert paths[0].parent == tmp_path / "custom" / "model_answer"


def test_export_overwrites_its_own_files(mt_export, tmp_path):
    run, _ = mt_export
    first = export_spec_bench(run, tmp_path, ["ngram"])
    again = export_spec_bench(run, tmp_path, ["ngram"])
    assert first == again and len(again[0].read_text().splitlines()) == 16
    assert sorted(p.name for p in again[0].parent.iterdir()) == sorted(p.name for p in again)  # no temp files left


def test_paired_export_keeps_only_questions_every_file_has(tmp_path):
    run = write_mt_run(tmp_path / "run")
    ngram = run / "answers" / "ngram.jsonl"
    ngram.write_text("".join(ngram.read_text().splitlines(keepends=True)[:-1]))  # interrupted before the last
    paths = export_spec_bench(run, tmp_path / "paired", ["ngram"])
    counts = [len(p.read_text().splitlines()) for p in paths]
    assert counts == [15, 15]
    unpaired = export_spec_bench(run, tmp_path / "unpaired", ["ngram"], paired=False)
    assert [len(p.read_text().splitlines()) for p in unpaired] == [16, 15]


# ---- errors -----------------------------------------------------------------------------------------------
def one_line_error(call, *fragments: str) -> None:
    with pytest.raises(SpecbenchError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_error_paths(tmp_path):
    run = write_mt_run(tmp_path / "run")
    one_line_error(lambda: export_spec_bench(tmp_path / "nowhere", tmp_path / "out"), "not a specbench run directory")
    one_line_error(lambda: export_spec_bench(run, tmp_path / "out", ["ngram", "medusa"]), "medusa", "it has ", "ngram", "chain")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    one_line_error(lambda: export_spec_bench(run, blocker, ["ngram"]), "cannot write", str(blocker))
    no_baseline = write_mt_run(tmp_path / "no-vanilla", drafters=("ngram", "chain"))
    one_line_error(lambda: export_spec_bench(no_baseline, tmp_path / "out"), "no vanilla answers")
    (run / "manifest.json").unlink()
    one_line_error(lambda: export_spec_bench(run, tmp_path / "out"), "no manifest.json")
    assert len(export_spec_bench(run, tmp_path / "out", model="m", dtype="float32", bench="mt_bench")) == 3
    (run / "manifest.json").write_text('{"config": {}}')
    one_line_error(lambda: export_spec_bench(run, tmp_path / "out"), "manifest.json lacks")
    (run / "answers" / "ngram.jsonl").write_text('{"question_id": 81, "choi')
    one_line_error(lambda: export_spec_bench(run, tmp_path / "out", model="m", dtype="d", bench="b"), "ngram.jsonl:1")


# ---- a real run: tiny random Llama, character-level BPE tokenizer ------------------------------------------
def char_bpe_tokenizer(folder: Path):
    """A 97-token byte-pair tokenizer saved to ``folder`` and loaded back with AutoTokenizer, as speed.py
    loads one: <pad>, <unk>, 26 letters, space, 64 merged letter pairs, 3 punctuation marks, EOS (id 96).
    It adds no BOS (like SmolLM2's), decodes by concatenation, and has a chat template for the runner."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    common = "etaoinsh"
    pairs = [(a, b) for a in common for b in common]
    tokens = ["<pad>", "<unk>", *string.ascii_lowercase, " ", *(a + b for a, b in pairs), ".", ",", "?", "</s>"]
    assert len(tokens) == VOCAB and tokens.index("</s>") == EOS
    model = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=pairs, unk_token="<unk>")
    backend = Tokenizer(model)
    backend.decoder = decoders.Fuse()
    template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] | lower }}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant: {% endif %}")
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token="</s>",
                                   chat_template=template, clean_up_tokenization_spaces=False)
    fast.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, single_thread) -> tuple[Path, list[Path], object]:
    root = tmp_path_factory.mktemp("tiny")
    tokenizer = char_bpe_tokenizer(root / "tokenizer")
    target = TargetModel(build_tiny_model("llama"), tokenizer)
    config = RunConfig(out=str(root / "run"), drafters=["vanilla", "ngram"], bench="demo",
                       categories=["writing", "math"], limit=1, max_new_tokens=24, warmup=False)
    Run(config, progress=False, target=target).execute()
    return root / "run", export_spec_bench(root / "run", root / "spec-bench", model="tiny-llama"), tokenizer


def test_real_run_agrees_with_the_summary_except_the_retokenised_count(tiny_run):
    run, paths, tokenizer = tiny_run
    assert [p.name for p in paths] == ["tiny-llama-vanilla-float32-temp-0.0.jsonl", "tiny-llama-ngram-float32-temp-0.0.jsonl"]
    assert all(p.parent.parts[-2:] == ("demo", "model_answer") for p in paths)
    row = summary_row(summarize(load_run(run)), "ngram", "overall")
    by_ids = spec_bench_speed(paths[1], paths[0], "overall", ids_count)
    assert by_ids["tau"] == row["tau"]
    assert by_ids["speedup"] == pytest.approx(row["speedup_mean_throughput"], rel=1e-12)

    recount = spec_bench_speed(paths[1], paths[0], "overall", retokenised_count(tokenizer))
    base_ids = sum(ids_count(json.loads(t)) for t in paths[0].read_text().splitlines())
    # Re-encoding merges character pairs the model emitted one by one, and "- 1" drops a real token per
    # turn (this tokenizer adds no BOS): fewer baseline tokens, a slower-looking baseline, a larger speedup.
    assert recount["base_tokens"] < base_ids
    assert recount["speedup"] > by_ids["speedup"]
    base = [json.loads(t) for t in paths[0].read_text().splitlines()]
    mine = [json.loads(t) for t in paths[1].read_text().splitlines()]
    count = retokenised_count(tokenizer)
    assert recount["speedup"] == pytest.approx(metrics.mean_throughput_speedup(
        [sum(b["choices"][0]["wall_time"]) for b in base], [count(b) for b in base],
        [sum(m["choices"][0]["wall_time"]) for m in mine], [ids_count(m) for m in mine]), rel=1e-12)


def test_real_run_answers_are_equal_for_equal_py(tiny_run):
    _, paths, _ = tiny_run
    assert spec_bench_equal(paths[0], paths[1])  # ngram is lossless: same texts as vanilla


def test_tokenizer_folder_errors(tmp_path):
    one_line_error(lambda: spec_bench_tokenizer(tmp_path), "no manifest.json naming the model")
    (tmp_path / "manifest.json").write_text(json.dumps({"model": {"name": "m", "path": str(tmp_path / "gone.gguf"),
                                                                  "sha256": "0" * 64}}))
    one_line_error(lambda: spec_bench_tokenizer(tmp_path), "gone.gguf is gone")


@pytest.mark.slow
def test_default_model_tokenizer_adds_no_bos(tmp_path, default_model_available):
    """The tokenizer folder handed to speed.py for a default-model run; it adds no BOS, so speed.py's
    ``len(ids) - 1`` drops a real token of every baseline turn."""
    from transformers import AutoTokenizer

    from specbench.model_source import resolve_model

    source = resolve_model("default")
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"model": {"name": source.name, "path": str(source.path), "sha256": source.sha256}}))
    tokenizer = AutoTokenizer.from_pretrained(spec_bench_tokenizer(tmp_path))
    text = "The lighthouse keeper has never seen the sea in daylight."
    assert tokenizer(text).input_ids == tokenizer(text, add_special_tokens=False).input_ids


def test_export_command_writes_the_files_and_errors_are_one_line(tmp_path, capsys):
    from specbench.harness.cli import main

    run = write_mt_run(tmp_path / "run")
    assert main(["export", str(run), "--format", "spec-bench", "--out", str(tmp_path / "sb")]) == 0
    printed = [Path(line) for line in capsys.readouterr().out.splitlines()]
    assert printed and all(path.exists() and path.parent.name == "model_answer" for path in printed)
    assert "-vanilla-" in printed[0].name
    assert main(["export", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("specbench: error: ")
