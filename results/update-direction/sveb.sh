#!/usr/bin/env bash
# The SVEB columns of issue 64's table (README.md here): the seven arms of methods.yaml evaluated
# leak-free (today's default protocol) on the report half of setting K's SVEB cases of
# results/train-study-2 (the half the study reported; results/valid-baselines/halves.py cuts it
# exactly), into sveb-sK-leak-free.json here. The paper-protocol columns are the study's own
# results-report.json (its arms at the time). Resumable: a results file here is skipped.
#
#     OMP_NUM_THREADS=1 results/update-direction/sveb.sh 1
set -euo pipefail
cd "$(dirname "$0")/../.."
setting=${1:?usage: sveb.sh SETTING}
H=${HISTA:-.venv/bin/hista}
PY=${PYTHON:-.venv/bin/python}
D=results/update-direction
out=$D/sveb-s$setting-leak-free.json
[[ -f $out ]] && { echo "$out: done"; exit 0; }
mkdir -p runs/update-direction
cases=runs/update-direction/sveb-s$setting-report.jsonl
$PY results/valid-baselines/halves.py results/train-study-2/sveb-$setting/cases.jsonl.gz \
    results/train-study-2/sveb-$setting/results-report.json $cases
$H sveb eval --cases $cases --methods-file $D/methods.yaml --device cpu --out $out > runs/update-direction/sveb-s$setting.log 2>&1
