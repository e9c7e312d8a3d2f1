#!/usr/bin/env bash
# Issue 43's command with `auto` per batch size after the eager batch step attends over its active width
# (BatchTreeCache.set_width), the same drafters and calibration as docs/runs/issue43-batch-auto; and the verify
# forward timed over the active width against the whole capacity (benchmarks/batch_width.py). Alone on the machine.
set -euo pipefail
.venv/bin/python -m benchmarks.batch_width --batches 4,8 --sizes 1,4,8 --prefixes 300,600 --capacity 1024 \
    --out docs/runs/issue43-active-width/batch_width.json
.venv/bin/specbench run --model default --drafters vanilla,ngram,medusa,hydra,ctc,eagle,eagle3 --bench mt_bench \
    --limit 1 --max-new-tokens 128 --batch-size 1,2,4,8 --calibration package --threads 2 \
    --out docs/runs/issue43-active-width "$@"
