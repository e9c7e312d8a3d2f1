#!/usr/bin/env bash
# The equal-data comparison's last stage with context columns: from run-3000x2.sh's checkpoint, one epoch over every
# train prompt (12,573), as cpu-2026-11-29-eagle3-full-sd05/train.sh did without them (eagle at the same data and
# schedule: cpu-2026-11-28-eagle3-full/eagle-equal.sh), then MT-bench limit 2 replays at budgets 4, 8, 16, 32 with
# and without context_vocab. About 2.5 hours of training at 2 threads (float32); resumable from
# $WORK/eagle3-full-sd05-trained-context.partial.pt. WORK and CACHE as in lib.sh (the cache holding every train prompt).
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
stem=eagle3-full-sd05-trained-context  # not ...-sd05-context: that name is the V'-only run's context replay
if [ ! -e "$work/$stem.safetensors" ]; then
    train eagle3 "$stem" --epochs 1 --samples-per-step 4 --lr 1e-3 --dtype float32 --checkpoint-steps 250 \
        --step-decay 0.5 --context-vocab --init-from "$work/eagle3-3000x2-v8192-fp32-sd05-context" || exit 1
fi
replay eagle3 "$stem" 2 -with-context context_vocab=true
replay eagle3 "$stem" 2 "" context_vocab=false  # explicit: a context-trained checkpoint defaults to on
