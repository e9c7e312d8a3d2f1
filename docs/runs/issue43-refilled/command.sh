#!/usr/bin/env bash
# Batches that stay refilled: MT-bench limit 4 (32 questions: 8 per row at batch 4, 4 at batch 8), `auto` per batch
# size with the active width and a step priced at its largest tree, the package's calibration set (the curves,
# profiles, loop timings and propose costs cached by docs/runs/issue43-active-width's run). Batch sizes above 1 only:
# each is compared with vanilla at its own size (summary.csv, throughput_speedup; the manifest's predictions).
set -euo pipefail
.venv/bin/specbench run --model default --drafters vanilla,ngram,hydra,eagle --bench mt_bench --limit 4 \
    --max-new-tokens 128 --batch-size 4,8 --calibration package --threads 2 --out docs/runs/issue43-refilled "$@"
