#!/bin/bash
# Tau with and without the conversation's own tokens in the draft vocabulary (the context_vocab drafter
# option), for every trained drafter, on MT-bench and Spec-Bench (limit 2 per category), budgets 2-16.
# Replay only (no timing): the answers are the target's greedy trajectories, recorded once and cached.
# Usage: SPECBENCH_DATA=../shared/data bash scripts/context_vocab_replay.sh [OUT_DIR]
set -euo pipefail
out=${1:-runs/context-vocab}
mkdir -p "$out"
drafters=medusa,hydra,ctc,ctc-ce,eagle
for bench in mt_bench spec_bench; do
  for context in true false; do
    options=()
    for drafter in ${drafters//,/ }; do options+=(--drafter-option "$drafter.context_vocab=$context"); done
    specbench replay --model default --drafters $drafters --bench $bench --limit 2 --max-new-tokens 128 \
      --budgets 2,4,8,16 --threads 2 --no-progress "${options[@]}" --out "$out/$bench-context-$context.csv"
  done
done
python scripts/compare_context_vocab.py "$out"
