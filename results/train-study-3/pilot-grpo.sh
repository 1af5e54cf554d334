#!/usr/bin/env bash
# Pilot, step 2 (PILOT.md): one GRPO run of recipe-3.yaml into runs/train-study-3/pilot-grpo,
# resumable. A session's processes and its runs/ folder end with it, so the pool measurement (the
# part that outlives a session) is kept here: `pilot-grpo.sh keep` copies the run's pool files
# (pool.new/ while it is measured, pool/ once training began) to pool-*.{json,jsonl} here, and
# `pilot-grpo.sh` puts them back before it trains, so a later session resumes the measurement
# from its last whole chunk, or reads the finished pool.
#
#     results/train-study-3/pilot-grpo.sh        # train (OMP_NUM_THREADS=2 by default)
#     results/train-study-3/pilot-grpo.sh keep   # copy the pool files here (then commit them)
set -euo pipefail
cd "$(dirname "$0")/../.."
D=results/train-study-3
run=runs/train-study-3/pilot-grpo
files=(settings.json accuracy.jsonl pool.jsonl)
kept() { [[ $1 == pool.jsonl ]] && echo $D/pool.jsonl || echo $D/pool-$1; }  # settings.json -> pool-settings.json
if [[ ${1:-} == keep ]]; then
  for folder in $run/pool $run/pool.new; do
    [[ -f $folder/settings.json ]] || continue
    for f in "${files[@]}"; do rm -f "$(kept $f)"; [[ -f $folder/$f ]] && cp $folder/$f "$(kept $f)"; done
    echo "kept $folder: $(wc -l < $folder/accuracy.jsonl) problems measured"
    [[ -f $folder/pool.jsonl ]] && echo "$(wc -l < $folder/pool.jsonl) problems in the pool"
    exit 0
  done
  echo "no pool measured in $run yet" >&2; exit 2
fi
if [[ -f $(kept settings.json) && ! -f $run/pool/settings.json && ! -f $run/pool.new/settings.json ]]; then
  folder=$run/pool.new
  [[ -f $(kept pool.jsonl) ]] && folder=$run/pool  # a finished measurement
  mkdir -p $folder
  for f in "${files[@]}"; do [[ -f $(kept $f) ]] && cp "$(kept $f)" $folder/$f; done
  echo "restored $folder from $D/pool-*"
fi
mkdir -p runs/train-study-3
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ${HISTA:-.venv/bin/hista} train $D/recipe-3.yaml resume=true \
    >> runs/train-study-3/pilot-grpo.log 2>&1
