#!/usr/bin/env bash
# Pilot, step 3 (PILOT.md): what the candidate arms (arms.yaml) would do, before any arm trains.
# Reads step 2's pool (pool.jsonl here, kept by pilot-grpo.sh: the train problems the base policy
# solves 2-6 times of 8) and its step-20 checkpoint (runs/train-study-3/pilot-grpo/checkpoint-20).
#
#     OMP_NUM_THREADS=1 results/train-study-3/step3.sh grad base   # update direction and differ, at the start
#     OMP_NUM_THREADS=1 results/train-study-3/step3.sh grad mid    # the same at GRPO's step 20
#     OMP_NUM_THREADS=1 results/train-study-3/step3.sh sveb        # leak-free SVEB, selection and report halves
#
# Each part resumes when cut short; its small results are copied here (grad-C.{json,md},
# grad-C-steps.jsonl.gz; sveb/).
set -euo pipefail
cd "$(dirname "$0")/../.."
H=${HISTA:-.venv/bin/hista}
D=results/train-study-3
run=runs/train-study-3/pilot-grpo
pool=$D/pool.jsonl
[[ -f $pool ]] || { echo "no $pool: step 2's pool is not measured yet (pilot-grpo.sh keep)" >&2; exit 2; }
problems=runs/train-study-3/pool-problems.jsonl
.venv/bin/python - "$pool" "$D/train.jsonl" "$problems" <<'PY'
import json, sys
kept = {json.loads(line)["id"] for line in open(sys.argv[1])}
rows = [line for line in open(sys.argv[2]) if json.loads(line)["id"] in kept]
open(sys.argv[3], "w").writelines(rows)
print(f"{sys.argv[3]}: {len(rows)} pool problems")
PY
case ${1:?usage: step3.sh grad base|mid, or sveb} in
  grad)
    checkpoint=${2:?usage: step3.sh grad base|mid}
    model=()
    [[ $checkpoint == mid ]] && model=(--model $run/checkpoint-20)
    out=runs/train-study-3/grad-$checkpoint
    $H sveb grad --recipe $D/recipe-3.yaml "${model[@]}" --tasks jsonl:$problems --problems 32 --groups 9 \
        --methods-file $D/arms.yaml --no-adam --out $out
    cp $out/grad.json $D/grad-$checkpoint.json
    cp $out/grad.md $D/grad-$checkpoint.md
    gzip -9 -n -c $out/steps.jsonl > $D/grad-$checkpoint-steps.jsonl.gz ;;
  sveb)
    tokens=$(sed -n 's/^ *max_completion_length: *//p' $D/recipe-3.yaml)
    mkdir -p $D/sveb
    $H sveb build --tasks jsonl:$problems --problems $(wc -l < $problems) --rollouts 8 --continuations 8 \
        --max-new-tokens $tokens --temperature 0.7 --seed 0 --out runs/train-study-3/sveb-cases.jsonl
    gzip -9 -n -c runs/train-study-3/sveb-cases.jsonl > $D/sveb/cases.jsonl.gz
    $H sveb split --cases $D/sveb/cases.jsonl.gz --out $D/sveb/split --select-on 0.5 --seed 0
    for part in selection report; do
      $H sveb eval --cases $D/sveb/split/$part.jsonl --methods-file $D/arms.yaml --protocol leak-free \
          --device cpu --out $D/sveb/results-$part.json
      $H sveb report --results $D/sveb/results-$part.json --out $D/sveb/report-$part
    done ;;
  *) echo "usage: step3.sh grad base|mid, or sveb" >&2; exit 2 ;;
esac
