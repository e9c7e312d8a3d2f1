#!/usr/bin/env bash
# eagle3's second epoch over every train prompt, warm-started from eagle3-full16k (train.sh) at half its peak
# learning rate, then its replay on MT-bench limit 2. Resumable: rerunning it goes on from
# $WORK/eagle3-full16k-e2.partial.pt. WORK as in train.sh.
set -uo pipefail
cd "$(dirname "$0")/../../.."
work=${WORK:-/work/e3}
export SPECBENCH_NO_PROGRESS=1 SPECBENCH_DATA=${SPECBENCH_DATA:-/work/shared/data}
while pgrep -f "eagle-equal.sh" > /dev/null; do sleep 20; done  # the equal-data eagle run before it
echo "$(date +%T) train"
/usr/bin/time -f "train %e s" .venv/bin/specbench train eagle3 --model default --cache "$work/cache3k" --epochs 1 \
    --samples-per-step 4 --lr 5e-4 --dtype bfloat16 --checkpoint-steps 300 --threads 2 --no-progress \
    --init-from "$work/eagle3-full16k" --out-checkpoint "$work/eagle3-full16k-e2"
echo "$(date +%T) replay"
/usr/bin/time -f "replay %e s" .venv/bin/specbench replay --model default --drafters eagle3 \
  --drafter-option "eagle3.checkpoint=$work/eagle3-full16k-e2" --bench mt_bench --limit 2 --max-new-tokens 128 \
  --budgets 4,8,16,32 --threads 2 --out-csv "$work/mtbench-limit2-eagle3-full16k-e2.csv"
echo "$(date +%T) done"
