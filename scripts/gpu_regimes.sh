#!/usr/bin/env bash
# Issue 42's GPU figures in one lease (docs/performance.md, "Compiled regime"): in order, each step with its
# own timeout so a slow one cannot eat the next,
#   1. benchmarks/regimes.py: vanilla eager and compiled beside transformers' generate() eager and with its
#      static cache (compiled), same process, same prompts, interleaved (REGIME_DRAFTERS: vanilla and hydra
#      by default; compilation of each bucket is the cost of every name added);
#   2. the report run: every drafter on MT-bench limit 1 x 2 turns, 128 tokens, fixed budgets, compiled
#      first (the new figures), then eager (--breakdown: CUDA events around the steps). Runs are interleaved
#      per question, so a step cut by its timeout still holds every drafter on the questions it reached
#      (`specbench run --resume` finishes it). The report of both is made afterwards (CPU is fine).
# Everything lands in OUT_DIR (answers kept).
#
# Usage: scripts/gpu_regimes.sh OUT_DIR [DTYPE]   (DTYPE float32 by default: ids must equal vanilla's)
# Environment: BACKEND (the compiled regime's --compile-backend: inductor by default, fused kernels, about 30 s per
# bucket to compile; cudagraphs captures the eager kernels in a second, but they run unfused: vanilla 10 ms/token
# on an H100), DRAFTERS, BUDGETS, REGIME_DRAFTERS, STEPS (default "regimes compiled eager": a subset runs only
# those), T_REGIMES / T_COMPILED / T_EAGER (seconds per step).
# Needs specbench installed with the default model importable (../shared/gpu/README.md's unpack step).
set -uo pipefail
out=${1:?usage: $0 OUT_DIR [DTYPE]}; dtype=${2:-float32}
mkdir -p "$out"
# sps's default int8 self-draft is CPU only (sps is not capturable: it runs eagerly in the compiled regime)
drafters=${DRAFTERS:-vanilla,ngram,medusa,hydra,ctc,ctc-ce,eagle,eagle3}
budgets=${BUDGETS:-16,ngram=5,medusa=16,ctc=32,ctc-ce=16,eagle=32,eagle3=32}
export SPECBENCH_NO_PROGRESS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
# from outside the checkout: there, the source folder `specbench/` (no harness inside: pyproject maps it in) would
# shadow the installed package that `python -m benchmarks.regimes` imports
out=$(realpath "$out"); root=$(pwd); steps=" ${STEPS:-regimes compiled eager} "; backend=${BACKEND:-inductor}
[[ $steps == *" regimes "* ]] && (cd "$out" && PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$root" \
    timeout "${T_REGIMES:-200}" python3 -m benchmarks.regimes --out "$out/regimes" --device cuda --dtype "$dtype" \
    --questions 4 --max-new-tokens 128 --drafters "${REGIME_DRAFTERS:-vanilla,hydra}" --budgets "$budgets" \
    --repeats 2 --compile-backend "$backend" > "$out/regimes.txt" 2>&1; echo "regimes rc=$?" >> "$out/status.txt")
for regime in compiled eager; do
    [[ $steps == *" $regime "* ]] || continue
    t=T_${regime^^}
    timeout "${!t:-170}" specbench run --out "$out/run-$regime" --device cuda --dtype "$dtype" --bench mt_bench \
        --limit 1 --max-new-tokens 128 --drafters "$drafters" --tree-budget "$budgets" --regime "$regime" \
        --breakdown $([ "$regime" = compiled ] && echo --compile-backend "$backend") > "$out/run-$regime.txt" 2>&1
    echo "run $regime rc=$?" >> "$out/status.txt"
done
