#!/usr/bin/env bash
# Is eagle3's first draft held back by the weight its training gives the later test-time-training steps? eagle3
# 3,000 x 2 with a 16,384-token draft vocabulary exactly as cpu-2026-11-27-eagle3's eagle3-3000x2-v16384 (the
# baseline, whose learning curve is measured every 250 steps the same way), but --step-decay 0.5 instead of 0.8:
# step j's loss weighs 0.5^(j-1), so the first draft's loss is a larger share of the total. Then the replay.
# Resumable (the training keeps its partial checkpoint). `--step-decay` was added for it. WORK as in cpu-2026-11-28-eagle3-full; the cache is that
# run's cache3k (layers 2, 15, 27; since that run it holds every train prompt, so --max-train-samples 3000 keeps the
# first 3,000, the baseline's).
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
train eagle3 eagle3-3000x2-v16384-sd05 --epochs 2 --samples-per-step 4 --lr 1e-3 --draft-vocab 16384 --dtype bfloat16 \
    --checkpoint-steps 250 --step-decay 0.5 --max-train-samples 3000 || exit 1
replay eagle3 eagle3-3000x2-v16384-sd05
