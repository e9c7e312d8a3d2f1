"""Where a run's settings come from: Hugging Face Hub ids for the model and for checkpoints (offline, from
a cache laid out as the hub client lays it out), `--preset`, and `--config FILE` (a settings file, or an
earlier run's manifest to run again), each under the options given explicitly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from specbench.errors import SpecbenchError
from specbench.harness.config import PRESETS, RunConfig, read_settings
from specbench.harness.options import drafter_options
from specbench.hub import is_hub_id, local_or_hub

SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(root: Path, repo_id: str, files_from: Path) -> Path:
    """``files_from`` placed in ``root`` as the hub client caches ``repo_id`` (refs/main -> snapshots/<sha>)."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    shutil.copytree(files_from, repo / "snapshots" / SNAPSHOT)
    return repo / "snapshots" / SNAPSHOT


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty hub cache, offline: the hub client reads these variables when it is first imported, so the
    commands run in subprocesses with them set."""
    root = tmp_path / "hf-hub"
    root.mkdir()
    env = os.environ | {"HF_HUB_CACHE": str(root), "HF_HUB_OFFLINE": "1"}
    return root, env


def test_hub_ids_are_told_from_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert is_hub_id("lmsys/vicuna-7b-v1.3") and is_hub_id("FasterDecoding/medusa-vicuna-7b-v1.3")
    assert not any(is_hub_id(s) for s in ("default", "model.gguf", "./a/b", "/a/b", "a/b/c", "~/m"))
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "dir").mkdir()
    assert not is_hub_id("local/dir")  # an existing path wins
    assert local_or_hub("local/dir", "x") == Path("local/dir")


def test_model_by_hub_id_offline_from_the_cache(tiny_model_dir, offline_hub, tmp_path):
    root, env = offline_hub
    snapshot = hub_cache(root, "someone/tiny-llama", tiny_model_dir)
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "specbench", "run", "--model", "someone/tiny-llama", "--drafters",
                           "vanilla,ngram", "--categories", "math", "--limit", "1", "--max-new-tokens", "6",
                           "--tree-budget", "4", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["name"] == "tiny-llama" and manifest["model"]["path"] == str(snapshot)
    assert manifest["config"]["model"] == "someone/tiny-llama"
    answer = json.loads((out / "answers" / "ngram.jsonl").read_text().splitlines()[0])
    assert answer["model_id"].startswith("tiny-llama")
    missing = subprocess.run([sys.executable, "-m", "specbench", "run", "--model", "someone/not-cached", "--drafters",
                              "vanilla", "--no-progress", "--out", str(tmp_path / "other")],
                             capture_output=True, text=True, env=env, timeout=600)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "someone/not-cached: not in the Hugging Face cache" in missing.stderr and "hf download" in missing.stderr


def test_checkpoint_by_hub_id_offline(llama_target, offline_hub, tmp_path):
    """``medusa.checkpoint=owner/name`` reads the authors' layout from the hub cache, as a path would."""
    from test_published import write_medusa

    root, env = offline_hub
    write_medusa(tmp_path / "heads", llama_target.config.hidden_size, llama_target.config.vocab_size)
    hub_cache(root, "someone/medusa-tiny", tmp_path / "heads")
    code = ("from specbench.drafters.medusa import MedusaDrafter; from tests_target import target\n"
            "d = MedusaDrafter(checkpoint='someone/medusa-tiny'); d.reset(target().handle)\n"
            "print(d.recipe['imported']['layout'], len(d.module.heads))")
    helper = tmp_path / "tests_target.py"
    helper.write_text("import sys\nsys.path.insert(0, %r)\nfrom conftest import build_tiny_model, make_target\n"
                      "def target():\n    return make_target(build_tiny_model('llama'))\n" % str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env | {
        "PYTHONPATH": str(tmp_path)}, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["medusa-1", "5"]


def test_preset_sits_under_the_options_given(monkeypatch):
    monkeypatch.setattr("specbench.registry.available_drafters", lambda: {"vanilla": None})
    config = RunConfig.from_layers({"preset": "spec-bench", "drafters": "vanilla", "max_new_tokens": "64"})
    assert (config.bench, config.device, config.dtype, config.temperature) == ("spec_bench", "cuda", "float16", 0.0)
    assert config.max_new_tokens == 64 and config.preset == "spec-bench"
    assert PRESETS["spec-bench"]["max_new_tokens"] == 1024 == RunConfig.from_layers({"preset": "spec-bench"}).max_new_tokens
    with pytest.raises(SpecbenchError, match="^--preset must be one of spec-bench, got 'vllm'$"):
        RunConfig.from_layers({"preset": "vllm"})


def test_config_files_toml_json_and_manifests(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('drafters = ["vanilla", "hydra"]\nmax_new_tokens = 32\npreset = "spec-bench"\n'
                    '[drafter_options.hydra]\ntree = "static"\ncheckpoint = "owner/hydra-heads"\n')
    config = RunConfig.from_layers({"config_file": str(toml), "dtype": "float32"})
    assert config.drafters == ["vanilla", "hydra"] and config.max_new_tokens == 32 and config.bench == "spec_bench"
    assert config.dtype == "float32"  # given explicitly: over the file's preset
    assert config.drafter_options == {"hydra": {"tree": "static", "checkpoint": "owner/hydra-heads"}}
    manifest = tmp_path / "manifest.json"
    recorded = asdict(config) | {"out": "runs/old", "resume": True}  # as build_manifest records a config
    manifest.write_text(json.dumps({"specbench_version": "0.1.0", "config": recorded}))
    again = RunConfig.from_layers({"config_file": str(manifest)})
    assert again.out != "runs/old" and again.resume is False  # a rerun writes somewhere new
    assert {k: v for k, v in asdict(again).items() if k not in ("out", "config_file")} == \
        {k: v for k, v in asdict(config).items() if k not in ("out", "config_file")}
    for text, error in (("max_new_tokens = [", "not TOML"), ("colour = 1", r"unknown option\(s\) colour")):
        toml.write_text(text)
        with pytest.raises(SpecbenchError, match=error):
            read_settings(str(toml))
    with pytest.raises(SpecbenchError, match="no such file"):
        read_settings(str(tmp_path / "none.json"))


def test_drafter_options_as_one_mapping():
    assert drafter_options(["ngram.max_depth=6", '{"hydra": {"tree": "static"}, "ngram": {"min_match": 2}}']) == \
        {"ngram": {"max_depth": 6, "min_match": 2}, "hydra": {"tree": "static"}}
    with pytest.raises(ValueError, match=r"expected \{DRAFTER: \{OPTION: VALUE\}\}"):
        drafter_options(['{"hydra": 3}'])
    with pytest.raises(ValueError, match="not a JSON mapping"):
        drafter_options(['{"hydra": '])


def test_command_line_layers_and_errors(tmp_path):
    from specbench.harness.cli import main

    toml = tmp_path / "run.toml"
    toml.write_text("temperature = 2\n")
    assert main(["run", "--config", str(toml), "--temperature", "x"]) == 2
    assert main(["run", "--config", str(tmp_path / "missing.toml")]) == 2
    assert main(["run", "--preset", "nope"]) == 2


def test_rerun_from_a_manifest_gives_the_same_ids(tiny_model_dir, tmp_path):
    common = ["--categories", "math", "--limit", "1", "--max-new-tokens", "6", "--no-progress"]
    first = subprocess.run([sys.executable, "-m", "specbench", "run", "--model", str(tiny_model_dir), "--drafters",
                            "vanilla,ngram", "--tree-budget", "3", *common, "--out", str(tmp_path / "a")],
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    again = subprocess.run([sys.executable, "-m", "specbench", "run", "--config", str(tmp_path / "a" / "manifest.json"),
                            "--no-progress", "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    before, after = (json.loads((tmp_path / run / "manifest.json").read_text())["config"] for run in ("a", "b"))
    assert {k: v for k, v in after.items() if k not in ("out", "config_file")} == \
        {k: v for k, v in before.items() if k not in ("out", "config_file")}
    ids = [[json.loads(line)["choices"][0]["output_ids"] for line in (tmp_path / run / "answers" / "ngram.jsonl").open()]
           for run in ("a", "b")]
    assert ids[0] == ids[1] and len(ids[0]) == 1


def test_all_leaves_out_drafters_that_cannot_run_on_the_target(tiny_model_dir, tmp_path):
    """``--drafters all`` on a model no trained drafter ships weights for runs the training-free ones and says
    why each other was left out; a trained drafter named explicitly still stops the run with one line."""
    from specbench.registry import available_drafters

    common = ["--model", str(tiny_model_dir), "--categories", "math", "--limit", "1", "--max-new-tokens", "4",
              "--tree-budget", "3", "--no-progress"]
    done = subprocess.run([sys.executable, "-m", "specbench", "run", *common, "--out", str(tmp_path / "all")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    ran = json.loads((tmp_path / "all" / "manifest.json").read_text())["config"]["drafters"]
    assert sorted(ran) == ["ngram", "sps", "vanilla"]
    left_out = sorted(set(available_drafters()) - set(ran))
    assert left_out == ["ctc", "ctc-ce", "eagle", "eagle3", "hydra", "medusa"]
    for name in left_out:
        assert f"specbench: {name} left out of --drafters all: no shipped {name} checkpoint" in done.stderr
    named = subprocess.run([sys.executable, "-m", "specbench", "run", *common, "--drafters", "vanilla,hydra",
                            "--out", str(tmp_path / "named")], capture_output=True, text=True, timeout=600)
    assert named.returncode == 2 and "no shipped hydra checkpoint" in named.stderr
