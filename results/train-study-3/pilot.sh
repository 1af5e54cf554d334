#!/usr/bin/env bash
# Pilot, step 1 (issue 65; PILOT.md here): the embedded model's base accuracy and answer length on
# each candidate setting, before any choice. Per candidate (its problems: pilot.py sets): greedy on
# its 100 validation problems and 8 samples at temperature 0.7 on the first 50, 256 new tokens, into
# runs/train-study-3/pilot/CANDIDATE-{greedy,t07}.json (hista eval resumes a cut run); then
# pilot.py writes pilot-base.md here. One thread per job: `pilot.sh A B & pilot.sh C D & wait`.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
H=${HISTA:-.venv/bin/hista}
D=results/train-study-3
out=runs/train-study-3/pilot
mkdir -p $out
for c in ${@:?name the candidates, e.g. A B}; do
  [[ -f $out/$c.jsonl ]] || { echo "no $out/$c.jsonl: run python $D/pilot.py sets first" >&2; exit 2; }
  echo "$c: $(sed -n "s/^$c  *//p" $D/candidates.txt) ($(date -u +%H:%M:%S))"
  $H eval --suite jsonl:$out/$c.jsonl --limit 100 --temperature 0 --max-new-tokens 256 --out $out/$c-greedy.json
  $H eval --suite jsonl:$out/$c.jsonl --limit 50 --k 8 --temperature 0.7 --max-new-tokens 256 --out $out/$c-t07.json
done
