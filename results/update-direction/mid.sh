#!/usr/bin/env bash
# The mid-run checkpoint of issue 64's check (README.md here): setting K's GRPO arm, seed 0, trained
# 20 of its 40 steps (the recipe's learning rate is constant, so these are the first 20 steps of the
# study's run) into runs/update-direction/sK-grpo-seed0-mid; run.sh K mid reads its final/ model.
set -euo pipefail
cd "$(dirname "$0")/../.."
setting=${1:?usage: mid.sh SETTING}
H=${HISTA:-.venv/bin/hista}
out=runs/update-direction/s$setting-grpo-seed0-mid
mkdir -p "$out/pool"
cp results/train-study-2/pool-settings-$setting.json "$out/pool/settings.json"
cp results/train-study-2/pool-accuracy-$setting.jsonl "$out/pool/accuracy.jsonl"
cp results/train-study-2/pool-$setting.jsonl "$out/pool/pool.jsonl"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} $H train results/train-study-2/recipe-$setting.yaml advantage_estimator.name=grpo \
    seed=0 output_dir=$out resume=true trl.max_steps=20 eval.every=100 > $out.log 2>&1
