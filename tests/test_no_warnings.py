"""No warnings: models are called with the cache keyword the installed transformers declares (``cache=`` from
5.24 on, where ``past_key_values=`` prints a FutureWarning and is removed in 5.40), and a short run on the
default model prints nothing on stderr with every Python warning turned into an error."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import warnings
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import ARCHS, PROMPTS, build_tiny_model, make_target
from specbench import kv
from specbench.drafters.sps import SpSDrafter
from specbench.harness.loop import generate
from specbench.registry import create_drafter

pytestmark = pytest.mark.usefixtures("single_thread")

ROOT = Path(__file__).resolve().parents[1]


def test_installed_transformers_is_within_the_declared_bound_and_the_cache_keyword_is_the_declared_one():
    """Models take their KV cache by the keyword their forward declares (``cache`` from transformers 5.24,
    ``past_key_values`` before, down to the 5.17 that GPU images ship): a wrong one would land in ``**kwargs``
    and the model would decode on an empty cache of its own, silently."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == "transformers"]
    assert "5.16.0" not in req.specifier and "5.17.0" in req.specifier and "6.0.0" not in req.specifier
    assert version("transformers") in req.specifier
    newer = tuple(int(p) for p in version("transformers").split(".")[:2]) >= (5, 24)
    for arch in ARCHS:
        model = build_tiny_model(arch)
        for module in (model, model.get_decoder()):
            assert kv.cache_keyword(module) == ("cache" if newer else "past_key_values"), arch
            assert kv.cache_keyword(module) in inspect.signature(module.forward).parameters, arch
        target = make_target(model)
        assert target.cache_keyword == kv.cache_keyword(target.decoder)


@pytest.mark.parametrize("arch", ARCHS)
def test_decoding_through_the_target_and_a_draft_model_warns_nothing(arch):
    """Prefill, tree verification (vanilla's chain and ngram's tree) and sps's draft-model forwards (int8 too) with
    every warning an error."""
    target = make_target(build_tiny_model(arch))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        drafters = [create_drafter("vanilla"), create_drafter("ngram"), SpSDrafter(model=target.model, depth=3),
                    SpSDrafter(self_draft="int8", depth=3)]  # torch.ao.quantization is deprecated in torch 2.9+
        for drafter in drafters:
            result = generate(target, drafter, PROMPTS[1], 12, 4)
            assert len(result.output_ids) == 12


@pytest.mark.slow
def test_short_default_model_run_prints_no_warning(tmp_path, default_model_available):
    """A short CLI run on the default model under ``-W error`` (and PYTHONWARNINGS=error for any child):
    it succeeds, and stderr holds no warning of any kind (transformers' logger included)."""
    env = {**os.environ, "PYTHONWARNINGS": "error", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    result = subprocess.run(
        [sys.executable, "-W", "error", "-m", "specbench", "run", "--drafters", "vanilla,ngram", "--bench", "demo",
         "--categories", "math", "--limit", "1", "--max-new-tokens", "8", "--tree-budget", "4", "--no-progress",
         "--out", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    assert "warn" not in result.stderr.lower(), result.stderr
    assert "deprecat" not in (result.stderr + result.stdout).lower(), result.stderr
    assert (tmp_path / "run" / "summary.csv").exists()
