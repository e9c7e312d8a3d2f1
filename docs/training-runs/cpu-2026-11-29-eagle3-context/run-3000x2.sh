#!/usr/bin/env bash
# The second epoch of run-3000x1.sh's schedule (its epoch-1 checkpoint copied to a stem of its own), then MT-bench
# limit 2 replays at budgets 4, 8, 16, 32 without and with context_vocab, against the step-decay-0.5 3,000 x 2 run
# without context columns (cpu-2026-11-28-eagle3-decay05/run-3000x2-fp32.sh; its plain replay is that run's
# mtbench-limit2 csv) and eagle-3000x2. Resumable (partial checkpoints every 250 steps). WORK as in lib.sh.
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
from=eagle3-3000x1-v8192-fp32-sd05-context stem=eagle3-3000x2-v8192-fp32-sd05-context
if [ ! -e "$work/$stem.safetensors" ]; then
    [ -e "$work/$stem.epoch1.pt" ] || cp "$work/$from.epoch1.pt" "$work/$stem.epoch1.pt" || exit 1
    train eagle3 "$stem" --epochs 2 --samples-per-step 4 --lr 1e-3 --draft-vocab 8192 --dtype float32 \
        --checkpoint-steps 250 --step-decay 0.5 --max-train-samples 3000 --context-vocab || exit 1
fi
replay eagle3 "$stem" 2 -with-context context_vocab=true
replay eagle3 "$stem" 2 "" context_vocab=false  # explicit: a context-trained checkpoint defaults to on
replay eagle3 eagle3-3000x2-v8192-fp32-sd05 2 -with-context context_vocab=true
