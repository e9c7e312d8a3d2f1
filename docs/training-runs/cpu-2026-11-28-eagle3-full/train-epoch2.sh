#!/usr/bin/env bash
# eagle3's second epoch over every train prompt, warm-started from eagle3-full16k (train.sh) at half its peak
# learning rate, then its replay on MT-bench limit 2. Resumable: rerunning it goes on from
# $WORK/eagle3-full16k-e2.partial.pt.
source "$(dirname "$0")/lib.sh"
after "eagle-equal.sh"  # the equal-data eagle run before it
train eagle3 eagle3-full16k-e2 --epochs 1 --samples-per-step 4 --lr 5e-4 --dtype bfloat16 --checkpoint-steps 300 \
    --init-from "$work/eagle3-full16k"
replay eagle3 eagle3-full16k-e2
