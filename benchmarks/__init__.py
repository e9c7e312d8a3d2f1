"""Benchmark scripts (run as ``python benchmarks/NAME.py``) and the pytest-benchmark suite (``test_micro_*.py``,
docs/benchmarks.md). A package only so that pytest imports the suite's modules as ``benchmarks.*``: its
``conftest`` then cannot shadow ``tests/conftest.py`` when both folders are collected in one run."""
