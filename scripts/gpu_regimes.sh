#!/usr/bin/env bash
# Issue 42's GPU figures in one lease (docs/performance.md, "Compiled regime"): in order, each step with its
# own timeout so a slow one cannot eat the next,
#   1. benchmarks/regimes.py: vanilla eager and compiled beside transformers' generate() eager and with its
#      static cache (compiled), same process, same prompts, interleaved; every drafter in both regimes;
#   2. the report run: every drafter on MT-bench limit 1 x 2 turns, 128 tokens, fixed budgets, eager, then
#      compiled (--breakdown: CUDA events around the steps), and one report with both side by side.
# Everything lands in OUT_DIR (answers kept).
#
# Usage: scripts/gpu_regimes.sh OUT_DIR [DTYPE]   (DTYPE float32 by default: ids must equal vanilla's)
# Needs specbench installed with the default model importable (../shared/gpu/README.md's unpack step).
set -uo pipefail
out=${1:?usage: $0 OUT_DIR [DTYPE]}; dtype=${2:-float32}
mkdir -p "$out"
drafters=vanilla,ngram,medusa,hydra,ctc,ctc-ce,eagle   # sps's default int8 self-draft is CPU only
budgets=${BUDGETS:-16,ngram=5,medusa=16,ctc=32,ctc-ce=16,eagle=32}
export SPECBENCH_NO_PROGRESS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
timeout 240 python3 -m benchmarks.regimes --out "$out/regimes" --device cuda --dtype "$dtype" --questions 4 \
    --max-new-tokens 128 --drafters "$drafters" --budgets "$budgets" --repeats 2 > "$out/regimes.txt" 2>&1
echo "regimes rc=$?" >> "$out/status.txt"
for regime in eager compiled; do
    timeout 150 specbench run --out "$out/run-$regime" --device cuda --dtype "$dtype" --bench mt_bench --limit 1 \
        --max-new-tokens 128 --drafters "$drafters" --tree-budget "$budgets" --regime "$regime" \
        > "$out/run-$regime.txt" 2>&1
    echo "run $regime rc=$?" >> "$out/status.txt"
done
specbench report "$out/run-eager" "$out/run-compiled" --out "$out/report" --charts png > "$out/report.txt" 2>&1
echo "report rc=$?" >> "$out/status.txt"
