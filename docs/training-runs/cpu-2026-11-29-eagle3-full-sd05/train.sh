#!/usr/bin/env bash
# Issue 44's equal-data comparison again with step decay 0.5: eagle3 warm-started from the float32 step-decay-0.5
# 3,000 x 2 run (cpu-2026-11-28-eagle3-decay05/run-3000x2-fp32.sh, 1,096,658 tokens) for one epoch over every train
# prompt (12,573), float32 (emulated bf16 on a CPU without AVX-512 bf16/AMX), then its MT-bench limit 2 replay at
# budgets 4, 8, 16, 32. Its counterpart is cpu-2026-11-28-eagle3-full/eagle-equal.sh: eagle 3,000 x 2, then one
# epoch over every prompt from it (3,390,132 tokens). Resumable: the cache grows by shards, the training goes on
# from $WORK/eagle3-full-sd05.partial.pt. WORK and CACHE as in lib.sh (the cache grown to every train prompt; the
# 3,000-prompt scripts read its first 3,000 with --max-train-samples).
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
stem=eagle3-full-sd05
if [ ! -e "$work/$stem.safetensors" ]; then
    echo "$(date +%T) distill -> every train prompt"
    /usr/bin/time -f "distill %e s" .venv/bin/specbench distill --model default \
        --tokens-from data/distill-tokens/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f --train 12573 --heldout 64 \
        --aux-layers --threads 2 --out "$cache" || exit 1
    train eagle3 "$stem" --epochs 1 --samples-per-step 4 --lr 1e-3 --dtype float32 --checkpoint-steps 250 \
        --step-decay 0.5 --init-from "$work/eagle3-3000x2-v8192-fp32-sd05" || exit 1
fi
replay eagle3 "$stem"
