#!/usr/bin/env bash
# The multi-seed training study of issue 31 (README.md here). Every run trains
# recipe.yaml with one estimator and one seed into runs/train-study/ESTIMATOR-sSEED (resumable:
# a run cut short continues from its last checkpoint), then study.py finish picks its
# best-validation checkpoint, evaluates it on the test problems (greedy on 200, avg@8 / pass@8
# at temperature 0.7 on 50), copies the small result files to runs/ here and prunes the run's
# other checkpoints. A run whose results are here already is skipped, so the script resumes.
#
#     results/train-study/run.sh [WORKER NWORKERS]   # e.g. "run.sh 0 2" and "run.sh 1 2" side by side
#     python results/train-study/study.py report     # the tables, plot and README section
#
# Runs are taken seed by seed (all estimators of seed 0 first), run i by worker i mod NWORKERS;
# each worker uses one thread (OMP_NUM_THREADS=1). SEEDS and ESTIMATORS override the lists;
# EXTRA adds recipe overrides (a quick check of the script: EXTRA="trl.max_steps=2 eval.every=1").
set -euo pipefail
cd "$(dirname "$0")/../.."
worker=${1:-0}
workers=${2:-1}
seeds=${SEEDS:-"0 1 2 3 4"}
estimators=${ESTIMATORS:-"grpo numca hista probe"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
H=${HISTA:-.venv/bin/hista}
PY=${PYTHON:-.venv/bin/python}
D=results/train-study
mkdir -p runs/train-study
i=0
for s in $seeds; do
  for e in $estimators; do
    if (( i++ % workers != worker )); then continue; fi
    name=$e-s$s
    if [[ -f $D/runs/$name/test-t07.json ]]; then echo "$name: done"; continue; fi
    echo "$name: training ($(date -u +%H:%M:%S))"
    $H train $D/recipe.yaml advantage_estimator.name=$e seed=$s output_dir=runs/train-study/$name resume=true ${EXTRA:-} \
        >> runs/train-study/$name.log 2>&1 || { echo "$name: training failed, see runs/train-study/$name.log"; exit 1; }
    $PY $D/study.py finish runs/train-study/$name --hista "$H"
  done
done
