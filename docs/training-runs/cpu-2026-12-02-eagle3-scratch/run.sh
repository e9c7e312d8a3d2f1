#!/usr/bin/env bash
# Issue 44 at the shipped eagle's data: eagle3 trained from scratch for 2 epochs over every train prompt (12,573;
# 4,586,948 tokens seen, what the shipped eagle saw), with the best recipe measured at smaller data: step decay 0.5
# (cpu-2026-11-28-eagle3-decay05), context columns (cpu-2026-11-29-eagle3-context), 8,192 draft tokens, float32, one
# warm-up + cosine schedule (the GPU script's recipe, scripts/gpu_eagle3.sh, on a CPU). Then MT-bench limit 2
# replays at budgets 4, 8, 16, 32 with and without the context columns. Resumable across sessions: the cache grows
# by shards, the training goes on from $WORK/eagle3-scratch-e2.partial.pt. WORK defaults to .e3work in the checkout
# (ignored by git; it survives between sessions on the same workspace), CACHE to WORK/cache.
export WORK=${WORK:-$(cd "$(dirname "$0")/../../.." && pwd)/.e3work}
export CACHE=${CACHE:-$WORK/cache}
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
mkdir -p "$work"
stem=eagle3-scratch-e2
if [ ! -e "$work/$stem.safetensors" ]; then
    echo "$(date +%T) distill -> every train prompt"
    /usr/bin/time -f "distill %e s" .venv/bin/specbench distill --model default \
        --tokens-from data/distill-tokens/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f --train 12573 --heldout 64 \
        --aux-layers --threads 2 --no-progress --out "$cache" || exit 1
    train eagle3 "$stem" --epochs 2 --samples-per-step 4 --lr 1e-3 --draft-vocab 8192 --dtype float32 \
        --checkpoint-steps 250 --step-decay 0.5 --context-vocab || exit 1
fi
replay eagle3 "$stem" 2 -with-context context_vocab=true
replay eagle3 "$stem" 2 "" context_vocab=false  # explicit: a context-trained checkpoint defaults to on
