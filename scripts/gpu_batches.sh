#!/usr/bin/env bash
# Issue 43's GPU figures in one lease (docs/performance.md, "Batch size on a CPU" has the CPU side): the
# throughput speedup of each drafter over vanilla at batch sizes up to 64, `auto` choosing each drafter's
# budget per batch size, in one regime per call (compiled first: the regime GPU users deploy). Each step has
# its own timeout so a slow one cannot eat the next; everything lands in OUT_DIR (answers kept).
#   1. `specbench profile` at every batch size of the sweep (the verify cost by bucket, cached);
#   2. batch 1 on MT-bench limit 1 (8 questions x 2 turns), the sizes above 1 on limit 8 (64 questions, so a
#      batch of 64 is full): two run directories, each drafter compared with vanilla at the same size;
#   3. one report of both.
#
# Usage: scripts/gpu_batches.sh OUT_DIR [REGIME]   (REGIME compiled by default; fp32: ids must equal vanilla's)
# Environment: BACKEND (compiled regime: --compile-backend, inductor by default; cudagraphs builds in a second, unfused),
# SIZES (default 4,16,64), DRAFTERS (default vanilla,ngram,hydra,eagle), TOKENS (default 128).
# Needs specbench installed with the default model importable (../shared/gpu/README.md's unpack step).
set -uo pipefail
out=${1:?usage: $0 OUT_DIR [REGIME]}; regime=${2:-compiled}
backend=(); [ "$regime" = compiled ] && backend=(--compile-backend "${BACKEND:-inductor}")
sizes=${SIZES:-4,16,64}; drafters=${DRAFTERS:-vanilla,ngram,hydra,eagle}; tokens=${TOKENS:-128}
mkdir -p "$out"
export SPECBENCH_NO_PROGRESS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
timeout 120 specbench profile --device cuda --regime "$regime" "${backend[@]}" --batch-size "1,$sizes" > "$out/profile.txt" 2>&1
echo "profile rc=$?" >> "$out/status.txt"
common=(--device cuda --bench mt_bench --max-new-tokens "$tokens" --drafters "$drafters" --regime "$regime"
        "${backend[@]}" --calibration package)
timeout 200 specbench run "${common[@]}" --limit 1 --out "$out/batch-1" > "$out/batch-1.txt" 2>&1
echo "batch 1 rc=$?" >> "$out/status.txt"
timeout 360 specbench run "${common[@]}" --limit 8 --batch-size "$sizes" --out "$out/batches" > "$out/batches.txt" 2>&1
echo "batches rc=$?" >> "$out/status.txt"
specbench report "$out/batch-1" "$out/batches" --out "$out/report" --charts png > "$out/report.txt" 2>&1
echo "report rc=$?" >> "$out/status.txt"
