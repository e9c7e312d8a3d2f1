#!/usr/bin/env bash
# Issue 13's sampling comparison with the shipped drafters: MT-bench limit 1, budget 4, one rule per run
# (see docs/performance.md, "Sampling"). Run from the repository root, alone on the machine.
set -euo pipefail
.venv/bin/specbench run --model default --drafters vanilla,medusa,hydra,eagle,sps --bench mt_bench --limit 1 \
    --max-new-tokens 128 --tree-budget 4 --temperature 1.0 --seed 0 --threads 2 --no-progress --out docs/runs/issue13-t1-b4 "$@"
