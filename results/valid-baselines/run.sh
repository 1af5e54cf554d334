#!/usr/bin/env bash
# Issue 63: the SVEB tables that chose defaults, re-scored under the leak-free protocol (README.md
# here). For each committed case file, its earlier selection and report halves (the case ids of the
# committed results files, halves.py) are evaluated with every candidate of methods.yaml; the
# defaults are chosen on the selection halves, the report halves report them. Resumable: a results
# file already here is skipped.
#
#     OMP_NUM_THREADS=1 results/valid-baselines/run.sh        # HALVES=report: the report halves only
set -euo pipefail
cd "$(dirname "$0")/../.."
H=${HISTA:-.venv/bin/hista}
PY=${PYTHON:-.venv/bin/python}
D=results/valid-baselines
mkdir -p runs/valid-baselines
sets=("sveb-study-short results/sveb-study/short" "sveb-study-long results/sveb-study/long"
      "train-study-2-s1 results/train-study-2/sveb-1" "train-study-2-s2 results/train-study-2/sveb-2")
for half in ${HALVES:-selection report}; do
  for entry in "${sets[@]}"; do
    read -r name folder <<< "$entry"
    out=$D/$name-$half.json
    [[ -f $out ]] && { echo "$out: done"; continue; }
    cases=runs/valid-baselines/$name-$half.jsonl
    $PY $D/halves.py $folder/cases.jsonl.gz $folder/results-$half.json $cases
    echo "$name $half: evaluating ($(date -u +%H:%M:%S))"
    $H sveb eval --cases $cases --methods-file $D/methods.yaml --device cpu --out $out > runs/valid-baselines/$name-$half.log 2>&1
  done
done
