#!/usr/bin/env bash
# The SVEB check of issue 43 (README.md here, "Does SVEB predict where training can differ?"):
# cases from setting K's filtered pool with the study's sampling settings, split by problem,
# and the study's four estimators (their defaults; nothing tuned) on each half, into sveb-K/.
#
#     OMP_NUM_THREADS=1 results/train-study-2/sveb.sh K      # the build resumes when cut short
set -euo pipefail
cd "$(dirname "$0")/../.."
setting=${1:?usage: sveb.sh SETTING}
H=${HISTA:-.venv/bin/hista}
D=results/train-study-2
out=$D/sveb-$setting
tokens=$(sed -n 's/^ *max_completion_length: *//p' $D/recipe-$setting.yaml)
mkdir -p runs/train-study-2 $out
if [[ ! -f $out/cases.jsonl.gz ]]; then
  $H sveb build --tasks jsonl:$D/pool-problems-$setting.jsonl --problems $(wc -l < $D/pool-problems-$setting.jsonl) --rollouts 16 --continuations 16 \
      --max-new-tokens $tokens --temperature 0.7 --seed 0 --out runs/train-study-2/sveb-$setting-cases.jsonl
  gzip -9 -n -c runs/train-study-2/sveb-$setting-cases.jsonl > $out/cases.jsonl.gz
fi
$H sveb split --cases $out/cases.jsonl.gz --out $out/split --select-on 0.5 --seed 0
for part in report selection; do
  $H sveb eval --cases $out/split/$part.jsonl --methods grpo,hista,numca,probe \
      --device cpu --out $out/results-$part.json
  $H sveb report --results $out/results-$part.json --out $out/report-$part
done
