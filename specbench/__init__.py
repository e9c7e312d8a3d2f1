"""specbench: a pluggable benchmark for speculative-decoding drafters.

For drafter authors::

    from specbench import Drafter, DraftTree, DraftContext, register_drafter

For notebooks and scripts (docs/python-api.ipynb)::

    import specbench
    result = specbench.run(drafters="vanilla,ngram", bench="mt_bench", limit=1, max_new_tokens=64)
    result.summary                      # pandas DataFrame, the rows of summary.csv
    specbench.load("runs/mt").report()  # a finished run, and its report

Names are imported on first use (PEP 562), so ``import specbench`` (and ``specbench report``) loads
neither torch nor transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "DraftContext": "specbench.drafter",
    "Drafter": "specbench.drafter",
    "TargetHandle": "specbench.drafter",
    "SpecbenchError": "specbench.errors",
    "DrafterOptionError": "specbench.errors",
    "available_drafters": "specbench.registry",
    "create_drafter": "specbench.registry",
    "get_drafter_class": "specbench.registry",
    "register_drafter": "specbench.registry",
    "DraftTree": "specbench.tree",
    "VerifyOutcome": "specbench.verify",
    "Sampling": "specbench.sampling",
    "verify_greedy": "specbench.verify",
    "Answer": "specbench.results",
    "Step": "specbench.results",
    "load_target": "specbench.model",
    "TargetModel": "specbench.model",
    "RunConfig": "specbench.harness.config",
    "run": "specbench.harness.api",
    "load": "specbench.harness.api",
    "RunResult": "specbench.harness.api",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'specbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
