"""The micro-benchmark suite in ``benchmarks/`` (docs/benchmarks.md) keeps working.

The suite only runs when asked for (``pytest benchmarks/ --benchmark-only``), so nothing else would notice
if it broke. Here it runs once in a subprocess with timing disabled (each benchmarked call made once, its
checks run), which needs the real default model; and its command line is checked without the model:
``--benchmark-only`` must not clash with the ``--benchmark-disable`` in pyproject's ``addopts``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: 7 sizes x 2 shapes of verify, 6 built-in drafters' propose, 1 loop overhead
EXPECTED_AT_LEAST = 14 + 6 + 1


def run_suite(*args: str, timeout: float, threads: int | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "benchmarks", "-p", "no:cacheprovider", *args]
    # not an xdist worker's variables: pytest-benchmark reads PYTEST_XDIST_WORKER as "xdist is on" and disables timing
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_XDIST")}
    if threads is not None:
        env["SPECBENCH_BENCH_THREADS"] = str(threads)
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def outcome(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"


def test_benchmark_only_collects_despite_addopts_disable():
    """``--benchmark-only`` with pyproject's ``--benchmark-disable`` (benchmarks/conftest.py resolves it)."""
    proc = run_suite("--benchmark-only", "--collect-only", "-q", timeout=120)
    assert proc.returncode == 0, outcome(proc)
    assert "Can't have both" not in proc.stdout + proc.stderr
    collected = re.findall(r"^benchmarks/test_micro_\w+\.py::", proc.stdout, flags=re.M)
    assert len(collected) >= EXPECTED_AT_LEAST, outcome(proc)


@pytest.mark.slow
def test_suite_passes_with_timing_disabled(default_model_available):
    """Every benchmark runs once (``--benchmark-disable``) and passes; none is skipped. One torch thread:
    nothing is timed, and on a shared 2-core machine two threads per forward can be ~10x slower."""
    proc = run_suite("--benchmark-disable", "-q", "-x", "-rfEs", timeout=600, threads=1)
    assert proc.returncode == 0, outcome(proc)
    summary = proc.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= EXPECTED_AT_LEAST, outcome(proc)
    assert not re.search(r"skipped|failed|error", summary), outcome(proc)
