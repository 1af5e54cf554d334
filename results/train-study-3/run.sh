#!/usr/bin/env bash
# The runs of train-study-3 (issue 65; DESIGN.md here, which must be committed before the first).
# Every run trains recipe-3.yaml with one arm and one seed into runs/train-study-3/ARM-seedS
# (resumable from its last checkpoint while the session lasts), evaluates its final checkpoint on
# test.jsonl (greedy on all of it, the primary metric; 8 samples at temperature 0.7 on its first
# 100), copies the small result files to runs/ARM-seedS/ here (metrics.jsonl, the evaluations
# gzipped with their completions; test-t07.json.gz last) and removes the run's checkpoints. A run
# whose results are here is skipped, so the script resumes across sessions; a run a session's end
# cuts short starts again (a session's run folder ends with it).
#
#     results/train-study-3/run.sh & results/train-study-3/run.sh & wait   # two workers side by side
#
# Runs go seed by seed (every arm of seed 0 first); a worker takes the next run no worker has
# claimed (runs/train-study-3/claims/NAME, made atomically), one thread each (OMP_NUM_THREADS=1).
# Workers stopped midway leave their claims: remove runs/train-study-3/claims before starting
# again. SEEDS and ARMS override the lists (ARMS: names of arms.sh); EXTRA adds recipe overrides
# (a check of the script: SEEDS=0 ARMS=grpo EXTRA="trl.max_steps=2 eval.every=1" TAG=-check).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=results/train-study-3
[[ -f $D/DESIGN.md ]] || { echo "no $D/DESIGN.md: the design is written before the first run" >&2; exit 2; }
[[ -f $D/test.jsonl ]] || { echo "no $D/test.jsonl (DESIGN.md says how it is made)" >&2; exit 2; }
source $D/arms.sh   # ARM_ARGS[name]: the recipe overrides of each arm; COMMON_ARGS, DEFAULT_ARMS, DEFAULT_SEEDS
seeds=${SEEDS:-$DEFAULT_SEEDS}
arms=${ARMS:-$DEFAULT_ARMS}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
H=${HISTA:-.venv/bin/hista}
recipe=$D/recipe-3.yaml
tokens=$(sed -n 's/^ *max_completion_length: *\([0-9]*\).*/\1/p' "$recipe")
mkdir -p runs/train-study-3/claims
claim() { mkdir runs/train-study-3/claims/$1 2>/dev/null; }  # true for the first worker only
finish() {  # MODEL NAME: the test evaluations of MODEL into runs/NAME/ here
  local out=runs/train-study-3/$2 keep=$D/runs/$2
  mkdir -p $out "$keep"
  $H eval --model $1 --suite jsonl:$D/test.jsonl --temperature 0 --max-new-tokens $tokens \
      --out $out/test-greedy.json >> runs/train-study-3/$2.log 2>&1
  $H eval --model $1 --suite jsonl:$D/test.jsonl --limit 100 --k 8 --temperature 0.7 \
      --max-new-tokens $tokens --out $out/test-t07.json >> runs/train-study-3/$2.log 2>&1
  gzip -9 -n -c $out/test-greedy.json > "$keep/test-greedy.json.gz"
  gzip -9 -n -c $out/test-t07.json > "$keep/test-t07.json.gz.tmp" && mv "$keep/test-t07.json.gz.tmp" "$keep/test-t07.json.gz"
}
if [[ ! -f $D/runs/base/test-t07.json.gz ]] && claim base; then  # the base model, once
  echo "base: evaluating ($(date -u +%H:%M:%S))"
  finish smollm2-135m-instruct base
fi
for s in $seeds; do
  for a in $arms; do
    name=$a-seed$s${TAG:-}
    out=runs/train-study-3/$name
    keep=$D/runs/$name
    if [[ -f $keep/test-t07.json.gz ]]; then echo "$name: done"; continue; fi
    claim $name || continue
    mkdir -p "$out/pool"  # the pool measured once (pilot step 2), as every run would measure it
    cp $D/pool-settings.json "$out/pool/settings.json"
    cp $D/pool-accuracy.jsonl "$out/pool/accuracy.jsonl"
    cp $D/pool.jsonl "$out/pool/pool.jsonl"
    read -ra args <<< "${ARM_ARGS[$a]:?no arm $a in arms.sh} ${COMMON_ARGS:-}"
    echo "$name: training ($(date -u +%H:%M:%S))"
    $H train "$recipe" "${args[@]}" seed=$s output_dir=$out resume=true ${EXTRA:-} >> runs/train-study-3/$name.log 2>&1 \
        || { echo "$name: training failed, see runs/train-study-3/$name.log"; exit 1; }
    echo "$name: evaluating ($(date -u +%H:%M:%S))"
    mkdir -p "$keep" && cp $out/metrics.jsonl "$keep/"
    finish $out/final $name
    rm -rf $out/checkpoint-* $out/final
    echo "$name: done ($(date -u +%H:%M:%S))"
  done
done
