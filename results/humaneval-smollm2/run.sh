#!/usr/bin/env bash
# Issue 32: HumanEval offline on the embedded SmolLM2-135M-Instruct (2 CPU cores). Needs the code
# extra (pip install 'hista[code]'; setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
H=.venv/bin/hista
O=results/humaneval-smollm2
# greedy pass@1 and 8 samples at temperature 0.8 (pass@1..8), 164 problems, 512-token cap; resumable
$H eval --suite humaneval --out runs/eval/humaneval.json
cp runs/eval/humaneval.json runs/eval/humaneval.md $O/
# a short SVEB build: the first 32 problems, 8 rollouts each, problems with accuracy in [0.1, 0.8]
# kept, one state per problem, 4 continuations per state
$H sveb build --preset quick --tasks humaneval:all --problems 32 --rollouts 8 --continuations 4 \
  --max-new-tokens 384 --out runs/sveb-humaneval/cases.jsonl
$H sveb eval --cases runs/sveb-humaneval/cases.jsonl --out $O/sveb-results.json
cp runs/sveb-humaneval/cases.jsonl $O/sveb-cases.jsonl
python3 $O/accuracy.py runs/eval/humaneval.samples.jsonl $O/sveb-cases.jsonl > $O/accuracy.txt
