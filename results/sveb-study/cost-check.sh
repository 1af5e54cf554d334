#!/usr/bin/env bash
# Issue 45, part 1: a cheaper structure rule checked on cases that no study file holds (README.md
# here, "The next check" and "A second candidate"). For one setting (short or long) of one check
# (1: the cost rule, seed 1; 2: the second candidate, seed 2, operands up to 20): build fresh
# cases from the built-in tasks' train problems, drop any case whose problem text is in a case
# file committed before the check, and evaluate GRPO, the default Hista the checks compared
# against (interval 10, stride 1 and min_distance 5: what the default profile gave at these
# lengths before rule 2) and the candidate on them. Every parameter the default profile has since
# changed is spelled out, so that a rerun evaluates what the checks did.
# Resumable: the build resumes from its file, and a setting whose results exist is skipped.
#
#     results/sveb-study/cost-check.sh short 1 & results/sveb-study/cost-check.sh long 1 & wait
#     python results/sveb-study/cost_check.py cost-check     # tables + decision (cost-check/check.md)
#
# Check 1 took about 1.8 hours on two free cores (one thread per setting); check 2 writes to
# cost-check-2/. HISTA: the hista command (default: hista on PATH); PYTHON: a Python that imports
# hista. A check of the script: OUT=/tmp/cc EXTRA="--problems 2 --rollouts 4 --continuations 2
# --max-new-tokens 16 --no-filter" (OUT: where the setting folders go; EXTRA: build options added
# last). BUILD_ONLY=1 stops after the build.
set -euo pipefail
setting=${1:?usage: cost-check.sh short|long [1|2]}
check=${2:-1}
here=$(dirname "$0")
hista=${HISTA:-hista}
python=${PYTHON:-python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
committed=("$here/short/cases.jsonl.gz" "$here/long/cases.jsonl.gz")
case $check in
    1) seed=1 max="" folder=cost-check
       candidate="hista?layer=-8&interval=12&stride=5&min_distance=5&label=Hista (cost rule)" ;;
    2) seed=2 max="&max_value=20" folder=cost-check-2
       committed+=("$here/cost-check/short/cases.jsonl.gz" "$here/cost-check/long/cases.jsonl.gz")
       candidate="hista?layer=-8&interval=12&stride=5&min_distance=1&label=Hista (rule 2)" ;;  # the pick of sweep-hista-weights-s5
    *) echo "cost-check.sh: unknown check '$check' (1 or 2)" >&2; exit 2 ;;
esac
out=${OUT:-$here/$folder}/$setting
mkdir -p "$out"
[[ -f $out/results.json ]] && { echo "$setting: done"; exit 0; }
case $setting in
    short) build=(--tasks "builtin:arith?steps=1$max" --tasks builtin:choice --problems 100 --rollouts 16
                  --continuations 16 --max-new-tokens 96) ;;
    long) build=(--preset long --problems 120)
          [[ -n $max ]] && build+=(--tasks "builtin:arith?steps=1$max&explain=yes") ;;
    *) echo "cost-check.sh: unknown setting '$setting' (short or long)" >&2; exit 2 ;;
esac
if [[ ! -f $out/cases.jsonl.gz ]]; then
    "$hista" sveb build "${build[@]}" --split train --seed "$seed" ${EXTRA:-} --out "$out/build.jsonl"
    "$python" "$here/cost_check.py" fresh "$out/build.jsonl" "${committed[@]}" | gzip -9 -n > "$out/cases.jsonl.gz.tmp"
    mv "$out/cases.jsonl.gz.tmp" "$out/cases.jsonl.gz" && rm "$out/build.jsonl"
fi
[[ -n ${BUILD_ONLY:-} ]] && exit 0
"$hista" sveb eval --cases "$out/cases.jsonl.gz" --out "$out/results.json" \
    --methods "grpo,hista?layer=-8&interval=10&stride=1&min_distance=5&label=Hista (default),$candidate"
