#!/usr/bin/env bash
# Issue 45, part 1: the cost rule checked on cases that neither study setting holds (README.md
# here, "The next check"). For one setting (short or long): build fresh cases from the built-in
# tasks' train problems with seed 1, drop any case whose problem text is in either study file,
# and evaluate GRPO, today's default Hista (interval 10, stride 1: what the structure rule gives
# at these lengths) and the cost rule (interval 12, stride 5) on them. Resumable: the build
# resumes from its file, and a setting whose results exist is skipped.
#
#     results/sveb-study/cost-check.sh short & results/sveb-study/cost-check.sh long & wait
#     python results/sveb-study/cost_check.py     # the tables and the decision (cost-check/check.md)
#
# About 1.8 hours on two free cores (one thread per setting). HISTA: the hista command (default:
# hista on PATH); PYTHON: a Python that imports hista. A check of the script: OUT=/tmp/cc
# EXTRA="--problems 2 --rollouts 4 --continuations 2 --max-new-tokens 16 --no-filter" (OUT: where
# the setting folders go, default cost-check/ here; EXTRA: build options added last).
set -euo pipefail
setting=${1:?usage: cost-check.sh short|long}
here=$(dirname "$0")
hista=${HISTA:-hista}
python=${PYTHON:-python}
out=${OUT:-$here/cost-check}/$setting
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$out"
[[ -f $out/results.json ]] && { echo "$setting: done"; exit 0; }
case $setting in
    short) build=(--tasks 'builtin:arith?steps=1' --tasks builtin:choice --problems 100 --rollouts 16
                  --continuations 16 --max-new-tokens 96) ;;
    long) build=(--preset long --problems 120) ;;
    *) echo "cost-check.sh: unknown setting '$setting' (short or long)" >&2; exit 2 ;;
esac
if [[ ! -f $out/cases.jsonl.gz ]]; then
    "$hista" sveb build "${build[@]}" --split train --seed 1 ${EXTRA:-} --out "$out/build.jsonl"
    "$python" "$here/cost_check.py" fresh "$out/build.jsonl" "$here/short/cases.jsonl.gz" \
        "$here/long/cases.jsonl.gz" | gzip -9 -n > "$out/cases.jsonl.gz.tmp"
    mv "$out/cases.jsonl.gz.tmp" "$out/cases.jsonl.gz" && rm "$out/build.jsonl"
fi
"$hista" sveb eval --cases "$out/cases.jsonl.gz" --out "$out/results.json" \
    --methods "grpo,hista?layer=-8&interval=10&stride=1&label=Hista (default),hista?layer=-8&interval=12&stride=5&label=Hista (cost rule)"
