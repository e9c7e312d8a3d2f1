#!/usr/bin/env bash
# Issue 44 in one GPU lease: eagle3 on the data the shipped eagle saw (every train prompt, 2 epochs), which a CPU
# cannot finish within one session (the auxiliary cache took ~40 min at 2 threads, the two epochs ~3.3 hours, and
# neither survives to the next session: docs/training-runs/cpu-2026-11-27-eagle3-full/). In order, within SECONDS:
#   1. the auxiliary hidden-state cache (layers 2 / 15 / 27) for every train prompt and the 64 held-out ones, from
#      the committed token cache (no generation: the responses are there);
#   2. eagle3 trained from scratch with a 16,384-token draft vocabulary (DRAFT_VOCAB; INIT warm-starts instead)
#      for EPOCHS epochs in bf16 autocast, step decay STEP_DECAY (0.5: ahead of 0.8 at 3,000 x 1 on a CPU,
#      docs/training-runs/cpu-2026-11-28-eagle3-decay05/), with context columns (CONTEXT_VOCAB=0 leaves them out;
#      after a whole-cache epoch on a CPU they lifted MT-bench tau by 0.003-0.054,
#      docs/training-runs/cpu-2026-11-29-eagle3-context/), checkpointing every 500 steps, cut 120 s before the end;
#   3. the learning curve so far (scripts/learning_curve.py, also from a partial checkpoint) and, if the training
#      finished, the replay on MT-bench limit 2 at budgets 4, 8, 16 and 32 of the new eagle3 beside the shipped
#      eagle (issue 44's bar: eagle3 above eagle at every budget).
# Everything lands in OUT_DIR: eagle3.tar.gz (the checkpoint stem when finished, its curve, the logs, the cache
# manifest, the replay rows).
#
# Usage: scripts/gpu_eagle3.sh WORK_DIR OUT_DIR SECONDS
# On a lease (../shared/gpu/README.md): pack.sh moves data/ away, so copy the token cache into what a warm call
# carries: `cp -r .gpu/away/data/distill-tokens .gpu/bin/tokens` after pack.sh; the three calls; then, warm,
# `bash .gpu/bin/device-setup.sh && . /tmp/sb/env && TOKENS=.gpu/bin/tokens/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f
# bash scripts/gpu_eagle3.sh /tmp/e3 $OUT 560` (carry [".gpu/bin"], timeout_s 590).
# Environment: DEVICE (cuda), EPOCHS (2), TOKENS (the committed token cache), INIT (a stem to warm-start from; default
# none: from scratch, the shipped eagle's recipe), DRAFT_VOCAB (16384: at 3,000 x 2 on a CPU it lifted MT-bench tau by
# 0.007-0.035 over 8,192, docs/training-runs/cpu-2026-11-27-eagle3/; a warm start keeps its own), HIDDEN_BATCH (64), TRAIN (all) and HELDOUT (64) prompts, LIMIT (2) and MAX_NEW (128) for the
# replay; a CPU smoke test: DEVICE=cpu TRAIN=8 HELDOUT=64 EPOCHS=1 LIMIT=1 MAX_NEW=8 (the token cache holds 64 held-out prompts). Needs specbench installed with the default model importable.
set -uo pipefail
work=${1:?usage: $0 WORK_DIR OUT_DIR SECONDS}; out=${2:?}; seconds=${3:?}
began=$(date +%s)
left() { echo $(( seconds - ($(date +%s) - began) )); }
here=$(cd "$(dirname "$0")" && pwd)
device=${DEVICE:-cuda}
tokens=${TOKENS:-data/distill-tokens/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f}
init=${INIT-}  # from scratch; INIT=STEM warm-starts (keeping that checkpoint's draft vocabulary)
init_args=(); [ -n "$init" ] && init_args=(--init-from "$init")  # a warm start keeps the shipped draft vocabulary
context_args=(--context-vocab); [ "${CONTEXT_VOCAB:-1}" = 0 ] && context_args=()  # the drafter then drafts with them
mkdir -p "$work/logs" "$out"
pack() { (cd "$work" && tar czf "$out/eagle3.tar.gz" logs $(ls eagle3-full.safetensors eagle3-full.json \
    eagle3-full.curve.json cache/manifest.json replay-*.csv 2>/dev/null)); }

echo "$(date +%T) distill: auxiliary hidden states ($(left) s left)"
timeout "$(( $(left) - 240 ))" specbench distill --model default --tokens-from "$tokens" --train "${TRAIN:-all}" --heldout "${HELDOUT:-64}" \
    --aux-layers --device "$device" --batch-size "${HIDDEN_BATCH:-64}" --no-progress --out "$work/cache" \
    > "$work/logs/distill.log" 2>&1
echo "distill rc=$?" >> "$work/logs/status.txt"; pack

echo "$(date +%T) train eagle3 ($(left) s left)"
timeout "$(( $(left) - 120 ))" specbench train eagle3 --model default --cache "$work/cache" --epochs "${EPOCHS:-2}" \
    --samples-per-step 4 --lr 1e-3 --draft-vocab "${DRAFT_VOCAB:-16384}" --dtype bfloat16 --checkpoint-steps 500 --device "$device" \
    --step-decay "${STEP_DECAY:-0.5}" "${context_args[@]}" \
    --no-progress "${init_args[@]}" --out-checkpoint "$work/eagle3-full" > "$work/logs/train.log" 2>&1
echo "train rc=$?" >> "$work/logs/status.txt"
python3 "$here/learning_curve.py" "$work/eagle3-full" > "$work/logs/curve.txt" 2>&1; pack

if [ -f "$work/eagle3-full.safetensors" ]; then
    echo "$(date +%T) replay ($(left) s left)"
    for drafter in eagle3 eagle; do
        option=(); [ "$drafter" = eagle3 ] && option=(--drafter-option "eagle3.checkpoint=$work/eagle3-full")
        timeout "$(( $(left) - 15 ))" specbench replay --model default --drafters "$drafter" "${option[@]}" \
            --bench mt_bench --limit "${LIMIT:-2}" --max-new-tokens "${MAX_NEW:-128}" --budgets 4,8,16,32 --device "$device" --no-progress \
            --out-csv "$work/replay-$drafter.csv" > "$work/logs/replay-$drafter.log" 2>&1
        echo "replay $drafter rc=$?" >> "$work/logs/status.txt"; pack
    done
fi
cat "$work/logs/status.txt" "$work/logs/curve.txt"
