#!/usr/bin/env bash
# Issue 43's CPU command with `auto` per batch size (the default) and eagle3, calibrated on the package's set so
# that the main job's cached batch-1 curves and draft ratios are reused (SPECBENCH_CACHE of that run).
set -euo pipefail
.venv/bin/specbench run --model default --drafters vanilla,ngram,medusa,hydra,ctc,eagle,eagle3 --bench mt_bench \
    --limit 1 --max-new-tokens 128 --batch-size 1,2,4,8 --calibration package --threads 2 \
    --out docs/runs/issue43-batch-auto "$@"
