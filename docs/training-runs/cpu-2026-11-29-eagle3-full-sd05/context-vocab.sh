#!/usr/bin/env bash
# eagle3 with context_vocab=true (the sequence's own tokens outside its draft vocabulary scored by the target's
# lm_head rows, as eagle's cut does), replayed on MT-bench limit 2 at budgets 4, 8, 16, 32 like every row of the
# comparison: this run's checkpoint, then the shipped eagle3. WORK as in lib.sh.
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
replay_context() {  # replay_context NAME CHECKPOINT -> $work/mtbench-limit2-NAME-context.csv
    echo "$(date +%T) replay $1 with context_vocab"
    /usr/bin/time -f "replay %e s" .venv/bin/specbench replay --model default --drafters eagle3 \
        --drafter-option "eagle3.checkpoint=$2" --drafter-option eagle3.context_vocab=true --bench mt_bench \
        --limit 2 --max-new-tokens 128 --budgets 4,8,16,32 --threads 2 --out-csv "$work/mtbench-limit2-$1-context.csv"
}
replay_context eagle3-full-sd05 "$work/eagle3-full-sd05"
replay_context eagle3-shipped drafters/checkpoints/eagle3-SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f
echo "$(date +%T) done"
