#!/usr/bin/env bash
# Issue 44: does EAGLE-1's dense feature regression close eagle3's first-draft gap to eagle at the shipped eagle's
# data? cpu-2026-12-02-eagle3-scratch/run.sh exactly (every train prompt x 2 from scratch, one schedule, step decay
# 0.5, context columns, 8,192 draft tokens, float32, seed 0: the same data order) with --feature-weight 1 the only
# change: each training-time-test step's normed output is also pulled toward the target's own feature at its position
# (smooth L1, weighted as the step). The scratch run's learning curve, measured every 250 steps the same way, is the
# baseline point for point. Then MT-bench limit 2 replays at budgets 4, 8, 16, 32 with and without the context columns.
# Resumable across sessions like the scratch run (same WORK and CACHE: the cache is shared, and distill is a no-op once
# every shard exists).
export WORK=${WORK:-$(cd "$(dirname "$0")/../../.." && pwd)/.e3work}
export CACHE=${CACHE:-$WORK/cache}
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
mkdir -p "$work"
stem=eagle3-feature-e2
if [ ! -e "$work/$stem.safetensors" ]; then
    echo "$(date +%T) distill -> every train prompt (resumes; a no-op when complete)"
    .venv/bin/specbench distill --model default \
        --tokens-from data/distill-tokens/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f --train 12573 --heldout 64 \
        --aux-layers --threads 2 --no-progress --out "$cache" || exit 1
    train eagle3 "$stem" --epochs 2 --samples-per-step 4 --lr 1e-3 --draft-vocab 8192 --dtype float32 \
        --checkpoint-steps 250 --step-decay 0.5 --context-vocab --feature-weight 1 || exit 1
fi
replay eagle3 "$stem" 2 -with-context context_vocab=true
replay eagle3 "$stem" 2 "" context_vocab=false  # explicit: a context-trained checkpoint defaults to on
