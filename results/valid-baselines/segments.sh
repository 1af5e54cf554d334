#!/usr/bin/env bash
# Issue 63, part 3: segment cases on setting 1 of the training study (one-step addition up to 40,
# its filtered pool): two states per problem on one rollout, 16 rollouts, 16 continuations per
# state, the study's sampling (T 0.7, 96 tokens), seed 1 (the study's SVEB check used seed 0).
# Then every default and the leaking earlier rules, under both protocols (README.md here).
#
#     OMP_NUM_THREADS=1 results/valid-baselines/segments.sh      # the build resumes when cut short
set -euo pipefail
cd "$(dirname "$0")/../.."
H=${HISTA:-.venv/bin/hista}
D=results/valid-baselines
S=results/train-study-2
mkdir -p runs/valid-baselines
if [[ ! -f $D/segments-s1-cases.jsonl.gz ]]; then
  $H sveb build --tasks jsonl:$S/pool-problems-1.jsonl --problems ${PROBLEMS:-48} --rollouts 16 --continuations 16 \
      --states-per-problem 2 --same-rollout --max-new-tokens 96 --temperature 0.7 --seed 1 \
      --out runs/valid-baselines/segments-s1-cases.jsonl
  gzip -9 -n -c runs/valid-baselines/segments-s1-cases.jsonl > $D/segments-s1-cases.jsonl.gz
fi
methods=grpo,numca,hista,probe,blend,numca?states=path\&leave_one_out=false\&merge_tokens=50\&drop_last=true\&answered=reward,hista?include_self=true
for protocol in leak-free paper; do
  out=$D/segments-s1-$protocol.json
  [[ -f $out ]] && continue
  $H sveb eval --cases $D/segments-s1-cases.jsonl.gz --methods "$methods" --protocol $protocol --device cpu --out $out
  $H sveb report --results $out --out $D/segments-s1-$protocol
done
