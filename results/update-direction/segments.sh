#!/usr/bin/env bash
# The token-level column of issue 64's table (README.md here): the seven arms of methods.yaml on
# issue 63's same-rollout build of setting 1 (results/valid-baselines/segments-s1-cases.jsonl.gz:
# 37 segments between two states of one rollout, 8 decisive), leak-free, into segments-s1.json
# here: the share of decisive segments each credits with the sign of their Monte-Carlo change.
#
#     OMP_NUM_THREADS=1 results/update-direction/segments.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
H=${HISTA:-.venv/bin/hista}
D=results/update-direction
[[ -f $D/segments-s1.json ]] && { echo "$D/segments-s1.json: done"; exit 0; }
mkdir -p runs/update-direction
$H sveb eval --cases results/valid-baselines/segments-s1-cases.jsonl.gz --methods-file $D/methods.yaml --device cpu \
    --out $D/segments-s1.json > runs/update-direction/segments-s1.log 2>&1
