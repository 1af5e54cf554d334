#!/usr/bin/env bash
# The pilot of issue 42 (README.md here): GRPO with dynamic sampling on a difficulty-filtered
# pool, one run per learning rate, into runs/train-pilot/grpo-lrLR (resumable: resume=true).
# The pool is measured once, by the first run (runs/train-pilot/grpo-lrLR/pool/), and copied
# into the others before they start (the same settings: they read it instead of measuring).
#
#     results/train-pilot/run.sh 1.0e-4            # one learning rate (OMP_NUM_THREADS: threads)
#     results/train-pilot/run.sh 3.0e-5 1.0e-4     # one after the other
#     SUFFIX=-mask EXTRA=trl.mask_truncated_completions=true results/train-pilot/run.sh 3.0e-5
#                                                  # other settings: runs/train-pilot/grpo-lr3.0e-5-mask
#     RECIPE=recipe-2.yaml SUFFIX=-2 results/train-pilot/run.sh 3.0e-5   # the second setting
#
# A run copies the pool of an earlier run of the same recipe (NAME ending in SUFFIX).
#
# Each run's metrics.jsonl is copied to results/train-pilot/runs/NAME.jsonl when it ends, its
# evaluations' tables to results/train-pilot/eval/NAME/.
set -euo pipefail
cd "$(dirname "$0")/../.."
H=${HISTA:-.venv/bin/hista}
D=results/train-pilot
mkdir -p runs/train-pilot $D/runs
for lr in "$@"; do
  name=grpo-lr$lr${SUFFIX:-}
  out=runs/train-pilot/$name
  if [[ ! -f $out/pool/pool.jsonl ]]; then
    measured=$(ls runs/train-pilot/*${SUFFIX:-}/pool/pool.jsonl 2>/dev/null | head -1 || true)
    if [[ -n $measured ]]; then mkdir -p $out && cp -r "$(dirname "$measured")" $out/; fi
  fi
  echo "$name: training ($(date -u +%H:%M:%S))"
  $H train $D/${RECIPE:-recipe.yaml} trl.learning_rate=$lr output_dir=$out resume=true ${EXTRA:-} >> runs/train-pilot/$name.log 2>&1 \
      || { echo "$name: training failed, see runs/train-pilot/$name.log"; exit 1; }
  cp $out/metrics.jsonl $D/runs/$name.jsonl
  mkdir -p $D/eval/$name && cp $out/eval/*.md $D/eval/$name/
  cp $out/pool/pool.jsonl $D/pool${SUFFIX:-}.jsonl
  cp $out/pool/accuracy.jsonl $D/pool-accuracy${SUFFIX:-}.jsonl
done
