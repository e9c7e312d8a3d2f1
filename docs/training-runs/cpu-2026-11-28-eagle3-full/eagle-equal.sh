#!/usr/bin/env bash
# eagle on eagle3-full16k's data and schedule (issue 44's equal-data comparison): eagle 3,000 x 2 again (its recipe
# of cpu-2026-11-27-eagle3, weights not kept then), then one epoch over every train prompt warm-started from it,
# then its replay on MT-bench limit 2 at budgets 4, 8, 16, 32.
source "$(dirname "$0")/lib.sh"
eagle=(--samples-per-step 8 --lr 1e-3 --train-vocab 8192)
[ -f "$work/eagle-3000x2.safetensors" ] || train eagle eagle-3000x2 "${eagle[@]}" --max-train-samples 3000 --epochs 2
train eagle eagle-full-from3000x2 "${eagle[@]}" --epochs 1 --checkpoint-steps 300 --init-from "$work/eagle-3000x2"
replay eagle eagle-full-from3000x2
