#!/usr/bin/env bash
# eagle on eagle3-full16k's data and schedule (issue 44's equal-data comparison): eagle 3,000 x 2 again (its recipe
# of cpu-2026-11-27-eagle3, weights not kept then), then one epoch over every train prompt warm-started from it,
# then its replay on MT-bench limit 2 at budgets 4, 8, 16, 32. WORK as in train.sh.
set -uo pipefail
cd "$(dirname "$0")/../../.."
work=${WORK:-/work/e3}
export SPECBENCH_NO_PROGRESS=1 SPECBENCH_DATA=${SPECBENCH_DATA:-/work/shared/data}
common=(--model default --cache "$work/cache3k" --samples-per-step 8 --lr 1e-3 --train-vocab 8192 --threads 2 --no-progress)
echo "$(date +%T) eagle 3000 x 2"
[ -f "$work/eagle-3000x2.safetensors" ] || /usr/bin/time -f "train %e s" .venv/bin/specbench train eagle "${common[@]}" \
    --max-train-samples 3000 --epochs 2 --out-checkpoint "$work/eagle-3000x2"
echo "$(date +%T) eagle whole cache, one epoch"
/usr/bin/time -f "train %e s" .venv/bin/specbench train eagle "${common[@]}" --epochs 1 --checkpoint-steps 300 \
    --init-from "$work/eagle-3000x2" --out-checkpoint "$work/eagle-full-from3000x2"
echo "$(date +%T) replay"
/usr/bin/time -f "replay %e s" .venv/bin/specbench replay --model default --drafters eagle \
  --drafter-option "eagle.checkpoint=$work/eagle-full-from3000x2" --bench mt_bench --limit 2 --max-new-tokens 128 \
  --budgets 4,8,16,32 --threads 2 --out-csv "$work/mtbench-limit2-eagle-full-from3000x2.csv"
echo "$(date +%T) done"
