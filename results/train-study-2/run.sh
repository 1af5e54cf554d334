#!/usr/bin/env bash
# The powered training study of issue 43 (README.md here). Every run trains recipe-K.yaml (K: the
# setting, 1 or 2) with one estimator and one seed into runs/train-study-2/sK-ESTIMATOR-seedS
# (resumable: a run cut short continues from its last checkpoint), evaluates its final checkpoint
# on the setting's test problems (greedy on all of test-K.jsonl, the primary metric; 8 samples at
# temperature 0.7 on its first 100), copies the small result files to runs/sK-ESTIMATOR-seedS/
# here (metrics.jsonl, the evaluations gzipped with their completions; test-t07.json.gz last)
# and removes the run's checkpoints. A run whose results are here is skipped, so the script resumes.
#
#     results/train-study-2/run.sh K & results/train-study-2/run.sh K & wait   # two workers side by side
#
# Runs go seed by seed (every estimator of seed 0 first); a worker takes the next run no worker
# has claimed (runs/train-study-2/claims/NAME, made atomically), one thread each (OMP_NUM_THREADS=1).
# Workers stopped midway leave their claims: remove runs/train-study-2/claims before starting again. SEEDS and ESTIMATORS override the lists ("strace": the strace
# loss with GRPO advantages). The pool is the committed pool-K files (measured once by pool.py).
# EXTRA adds recipe overrides (a check of the script: EXTRA="trl.max_steps=2 eval.every=1").
# "numca-valid" is issue 63's repaired Numca arm (the valid rule's settings, spelled out) and
# "grpo-rerun" its GRPO pair, run at the same commit (the study's GRPO runs do not reproduce bit for
# bit there: ESTIMATORS="numca-valid grpo-rerun"); TAG suffixes the run names (a reproduction check:
# SEEDS=0 ESTIMATORS=grpo TAG=-repro).
set -euo pipefail
cd "$(dirname "$0")/../.."
setting=${1:?usage: run.sh SETTING}
all_seeds=("" "0 1 2 3 4 5 6 7 8 9 10 11" "0 1 2 3 4 5")  # per setting (README.md: Seeds and pairing)
seeds=${SEEDS:-${all_seeds[$setting]}}
estimators=${ESTIMATORS:-"grpo hista numca probe"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
H=${HISTA:-.venv/bin/hista}
D=results/train-study-2
recipe=$D/recipe-$setting.yaml
tokens=$(sed -n 's/^ *max_completion_length: *//p' "$recipe")
mkdir -p runs/train-study-2/claims
claim() { mkdir runs/train-study-2/claims/$1 2>/dev/null; }  # true for the first worker only
finish() {  # MODEL NAME: the test evaluations of MODEL into runs/NAME/ here
  local out=runs/train-study-2/$2 keep=$D/runs/$2
  mkdir -p $out "$keep"
  $H eval --model $1 --suite jsonl:$D/test-$setting.jsonl --temperature 0 --max-new-tokens $tokens \
      --out $out/test-greedy.json >> runs/train-study-2/$2.log 2>&1
  $H eval --model $1 --suite jsonl:$D/test-$setting.jsonl --limit 100 --k 8 --temperature 0.7 \
      --max-new-tokens $tokens --out $out/test-t07.json >> runs/train-study-2/$2.log 2>&1
  gzip -9 -n -c $out/test-greedy.json > "$keep/test-greedy.json.gz"
  gzip -9 -n -c $out/test-t07.json > "$keep/test-t07.json.gz.tmp" && mv "$keep/test-t07.json.gz.tmp" "$keep/test-t07.json.gz"
}
if [[ ! -f $D/runs/s$setting-base/test-t07.json.gz ]] && claim s$setting-base; then  # the base model, once
  echo "s$setting-base: evaluating ($(date -u +%H:%M:%S))"
  finish smollm2-135m-instruct s$setting-base
fi
for s in $seeds; do
  for e in $estimators; do
    name=s$setting-$e-seed$s${TAG:-}
    out=runs/train-study-2/$name
    keep=$D/runs/$name
    if [[ -f $keep/test-t07.json.gz ]]; then echo "$name: done"; continue; fi
    claim $name || continue
    mkdir -p "$out/pool"
    cp $D/pool-settings-$setting.json "$out/pool/settings.json"
    cp $D/pool-accuracy-$setting.jsonl "$out/pool/accuracy.jsonl"
    cp $D/pool-$setting.jsonl "$out/pool/pool.jsonl"
    args=(advantage_estimator.name=$e)
    case $e in
      strace) args=(advantage_estimator.name=grpo loss.name=strace) ;;
      grpo-rerun) args=(advantage_estimator.name=grpo) ;;  # GRPO again at issue 63's commit (the pair of numca-valid)
      numca-valid)  # issue 63's repaired arm: Numca's valid rule, spelled out (today's default)
        args=(advantage_estimator.name=numca advantage_estimator.states=prefix advantage_estimator.leave_one_out=true
              advantage_estimator.merge_tokens=0 advantage_estimator.drop_last=false advantage_estimator.answered=table) ;;
    esac
    echo "$name: training ($(date -u +%H:%M:%S))"
    $H train "$recipe" "${args[@]}" seed=$s output_dir=$out resume=true ${EXTRA:-} >> runs/train-study-2/$name.log 2>&1 \
        || { echo "$name: training failed, see runs/train-study-2/$name.log"; exit 1; }
    echo "$name: evaluating ($(date -u +%H:%M:%S))"
    mkdir -p "$keep" && cp $out/metrics.jsonl "$keep/"
    sed -n '/^### Framework versions/,/^## /p' $out/README.md | grep '^- ' > "$keep/versions.md" || true  # the library versions (TRL's card)
    finish $out/final $name
    rm -rf $out/checkpoint-* $out/final
    echo "$name: done ($(date -u +%H:%M:%S))"
  done
done
