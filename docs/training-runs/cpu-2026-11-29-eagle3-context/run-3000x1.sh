#!/usr/bin/env bash
# Does eagle3 gain from the sequence's own tokens once it is trained on them? The step-decay-0.5 3,000 x 1 recipe
# (cpu-2026-11-28-eagle3-decay05/run-3000x1-fp32.sh: float32, 8,192 draft tokens, epoch 1 of a 2-epoch schedule) with
# --context-vocab: the loss also scores each sample's own tokens outside the draft vocabulary with the target's
# lm_head rows, as the drafter's context_vocab option does at inference. Then MT-bench limit 1 replays at budgets 4,
# 8, 16, 32: the new checkpoint without and with context_vocab, and the baseline checkpoint with it (its plain replay
# is that run's mtbench-limit1-eagle3-3000x1-v8192-fp32-sd05.csv). Resumable. WORK and CACHE as in lib.sh.
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
stem=eagle3-3000x1-v8192-fp32-sd05-context
options=(--samples-per-step 4 --lr 1e-3 --draft-vocab 8192 --dtype float32 --checkpoint-steps 250 --step-decay 0.5
         --max-train-samples 3000 --context-vocab)
first_of_two_epochs eagle3 "$stem" "${options[@]}" || exit 1
replay eagle3 "$stem" 1 "" context_vocab=false  # explicit: a context-trained checkpoint defaults to on
replay eagle3 "$stem" 1 -with-context context_vocab=true
replay eagle3 eagle3-3000x1-v8192-fp32-sd05 1 -with-context context_vocab=true
