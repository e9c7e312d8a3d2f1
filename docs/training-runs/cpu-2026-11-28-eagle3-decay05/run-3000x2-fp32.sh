#!/usr/bin/env bash
# The second epoch of run-3000x1-fp32.sh's schedule (its epoch-1 checkpoint copied to a stem of its own, so the
# 3,000 x 1 checkpoint stays), against cpu-2026-11-27-eagle3's eagle3-3000x2 (bf16 autocast, its only 2-epoch run with
# 8,192 draft tokens; step decay 0.8) and eagle-3000x2, then their MT-bench limit 2 replay at budgets 4, 8, 16, 32. Resumable (partial
# checkpoints every 250 steps). WORK and CACHE as in run.sh.
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
from=eagle3-3000x1-v8192-fp32-sd05 stem=eagle3-3000x2-v8192-fp32-sd05
[ -e "$work/$stem.epoch1.pt" ] || cp "$work/$from.epoch1.pt" "$work/$stem.epoch1.pt" || exit 1
train eagle3 "$stem" --epochs 2 --samples-per-step 4 --lr 1e-3 --draft-vocab 8192 --dtype float32 --checkpoint-steps 250 \
    --step-decay 0.5 --max-train-samples 3000 || exit 1
replay eagle3 "$stem"
