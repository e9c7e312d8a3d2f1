#!/usr/bin/env bash
# Issue 16's check on this machine: the same `specbench run` in one process and on 2 torchrun ranks (gloo, CPU)
# must give the same question set, ids, accept lengths and tau per drafter (scripts/compare_runs.py).
# Usage: scripts/sharded_vs_single.sh OUT_DIR [RUN ARGS...]   (defaults to the issue's command)
# Writes OUT_DIR/single and OUT_DIR/sharded, one after the other (never at once: they would share the cores).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/sharded_vs_single.sh OUT_DIR [RUN ARGS...]}"
shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--model default --drafters vanilla,ngram,hydra --bench mt_bench --limit 2
                               --max-new-tokens 64 --threads 1)
export OMP_NUM_THREADS=1
time .venv/bin/specbench run "${args[@]}" --no-progress --out "$out/single"
time .venv/bin/torchrun --standalone --nproc-per-node 2 -m specbench run "${args[@]}" --no-progress --out "$out/sharded"
.venv/bin/python scripts/compare_runs.py "$out/single" "$out/sharded"
