#!/usr/bin/env bash
# eagle's second epoch over every train prompt on eagle3's second-epoch schedule (train-epoch2.sh: warm start, half
# the first epoch's peak learning rate), from eagle-full-from3000x2 (eagle-equal.sh), then its replay on MT-bench
# limit 2: the equal-data comparison after two epochs. Resumable from $WORK/eagle-full-e2.partial.pt. WORK as in
# train.sh.
set -uo pipefail
cd "$(dirname "$0")/../../.."
work=${WORK:-/work/e3}
export SPECBENCH_NO_PROGRESS=1 SPECBENCH_DATA=${SPECBENCH_DATA:-/work/shared/data}
while pgrep -f "train-epoch2.sh" > /dev/null; do sleep 20; done  # eagle3's second epoch before it
echo "$(date +%T) train"
/usr/bin/time -f "train %e s" .venv/bin/specbench train eagle --model default --cache "$work/cache3k" --epochs 1 \
    --samples-per-step 8 --lr 5e-4 --train-vocab 8192 --checkpoint-steps 300 --threads 2 --no-progress \
    --init-from "$work/eagle-full-from3000x2" --out-checkpoint "$work/eagle-full-e2"
echo "$(date +%T) replay"
/usr/bin/time -f "replay %e s" .venv/bin/specbench replay --model default --drafters eagle \
  --drafter-option "eagle.checkpoint=$work/eagle-full-e2" --bench mt_bench --limit 2 --max-new-tokens 128 \
  --budgets 4,8,16,32 --threads 2 --out-csv "$work/mtbench-limit2-eagle-full-e2.csv"
echo "$(date +%T) done"
