"""scripts/install.sh picks where torch comes from without relying on this machine's pip configuration:
PyTorch's CPU index (PyPI as the extra index for its dependencies) when that index answers, else pip's
configured index with a plain note of what to run elsewhere. Checked through ``--print-torch-command``,
which changes nothing, with local indexes standing in for a reachable and an unreachable one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install.sh"


def torch_command(index: str) -> subprocess.CompletedProcess:
    env = os.environ | {"SPECBENCH_TORCH_INDEX": index, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), "--print-torch-command"], env=env, capture_output=True, text=True,
                          timeout=60)


def test_a_reachable_index_gives_the_cpu_build_with_pypi_for_its_dependencies(tmp_path):
    (tmp_path / "torch").mkdir()
    result = torch_command(tmp_path.as_uri())
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.split() == ["pip", "install", "torch==2.13.0", "--index-url", tmp_path.as_uri(),
                                     "--extra-index-url", "https://pypi.org/simple"]


def test_an_unreachable_index_falls_back_to_pips_index_and_says_what_to_run_elsewhere(tmp_path):
    result = torch_command((tmp_path / "missing").as_uri())
    assert result.returncode == 0
    assert result.stdout.split() == ["pip", "install", "torch==2.13.0"]
    note = result.stderr.strip()
    assert len(note.splitlines()) == 1 and "not reachable" in note
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in note


def test_an_unknown_argument_is_refused_in_one_line():
    result = subprocess.run(["bash", str(SCRIPT), "--nosuch"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1 and "--nosuch" in result.stderr
