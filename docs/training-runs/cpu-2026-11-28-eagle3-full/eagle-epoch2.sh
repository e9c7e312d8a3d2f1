#!/usr/bin/env bash
# eagle's second epoch over every train prompt on eagle3's second-epoch schedule (train-epoch2.sh: warm start, half
# the first epoch's peak learning rate), from eagle-full-from3000x2 (eagle-equal.sh), then its replay on MT-bench
# limit 2: the equal-data comparison after two epochs. Resumable from $WORK/eagle-full-e2.partial.pt.
source "$(dirname "$0")/lib.sh"
after "train-epoch2.sh"  # eagle3's second epoch before it
train eagle eagle-full-e2 --epochs 1 --samples-per-step 8 --lr 5e-4 --train-vocab 8192 --checkpoint-steps 300 \
    --init-from "$work/eagle-full-from3000x2"
replay eagle eagle-full-e2
