#!/bin/bash
# issue 43: auto budgets per batch size on the CPU (timing run: the eagle3 training is paused meanwhile)
cd /work/main
export SPECBENCH_CACHE=/work/mainjob/cache SPECBENCH_DATA=/work/shared/data SPECBENCH_NO_PROGRESS=1
OUT=docs/runs/issue43-auto-batch
start=$(date +%s)
.venv/bin/specbench run --drafters vanilla,ngram,hydra,eagle --bench mt_bench --limit 1 --max-new-tokens 128 \
  --batch-size 1,2,4 --calibration package --threads 2 --out $OUT > /work/quiet/run43.out 2> /work/quiet/run43.err
echo "rc=$? elapsed=$(( $(date +%s) - start ))" > /work/quiet/run43.done
