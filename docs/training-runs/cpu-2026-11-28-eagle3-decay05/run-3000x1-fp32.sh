#!/usr/bin/env bash
# The step-decay question at the recipe of cpu-2026-11-27-eagle3's eagle3-3000x1 (its baseline: float32, 8,192 draft
# tokens, epoch 1 of a 2-epoch schedule, step decay 0.8) with --step-decay 0.5, on a CPU without AVX-512 bf16 or
# AMX, where the bf16 recipe of run.sh trained too slowly for one session (no step-250 checkpoint in 40 minutes).
# Trains epoch 1 of 2, stops, writes the checkpoint from epoch 1 (the baseline's own two commands), replays MT-bench
# limit 1 at budgets 4, 8, 16, 32 as that run's replay/mtbench-limit1-eagle3-3000x1.csv did. WORK and CACHE as in
# run.sh (the cache: the first 3,000 train and 64 held-out prompts, layers 2, 15, 27).
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
stem=eagle3-3000x1-v8192-fp32-sd05
options=(--samples-per-step 4 --lr 1e-3 --draft-vocab 8192 --dtype float32 --checkpoint-steps 250 --step-decay 0.5
         --max-train-samples 3000)
first_of_two_epochs eagle3 "$stem" "${options[@]}" || exit 1
replay eagle3 "$stem" 1
