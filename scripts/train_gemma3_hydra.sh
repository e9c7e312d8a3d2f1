#!/usr/bin/env bash
# The shipped hydra for --model gemma3 (issue 16), as it was run (docs/scale-out.md):
#   1. distil a small cache (the base model's greedy answers to ShareGPT first turns, then hidden states),
#   2. train hydra over the draft vocabulary (Gemma-3's vocabulary is 262,144 tokens).
# Both steps resume: finished distillation shards and training epochs are kept.
#
# Usage: scripts/train_gemma3_hydra.sh WORK_DIR
# Environment: DEVICE (cpu), THREADS (2), TRAIN (384 prompts), HELDOUT (32), EPOCHS (4), SPECBENCH (specbench).
set -euo pipefail
work=${1:?usage: $0 WORK_DIR}
read -r -a sb <<< "${SPECBENCH:-specbench}"
common=(--model gemma3 --device "${DEVICE:-cpu}" --threads "${THREADS:-2}" --no-progress)
mkdir -p "$work"

echo "$(date +%T) distill"
"${sb[@]}" distill "${common[@]}" --train "${TRAIN:-384}" --heldout "${HELDOUT:-32}" --batch-size 32 \
    --out "$work/cache" >> "$work/distill.log" 2>&1
echo "$(date +%T) train hydra"
"${sb[@]}" train hydra "${common[@]}" --cache "$work/cache" --epochs "${EPOCHS:-4}" --train-vocab 8192 \
    --out "$work/hydra" >> "$work/train.log" 2>&1
echo "$(date +%T) done: $work/hydra.safetensors"
