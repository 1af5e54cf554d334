#!/usr/bin/env bash
# The evaluation of issue 14 on CPU: the embedded model and the checkpoints of the 100-step GRPO
# and Hista runs (recipes/cpu-compare.yaml) on the builtin preset (one-step arithmetic, test
# split, and multiple choice; 200 problems each), greedy and avg@8 / pass@8 at temperature 0.7,
# every completion capped at 64 tokens, the cap the runs trained with.
set -euo pipefail
cd "$(dirname "$0")/../../.."
H=.venv/bin/hista
for e in grpo hista; do
  $H train recipes/cpu-compare.yaml advantage_estimator.name=$e output_dir=runs/compare-$e   # ~20-25 min each
done
E="$H eval --suite builtin --max-new-tokens 64"
$E --out runs/eval/base.json
$E --temperature 0.7 --k 8 --out runs/eval/base-t07.json
for e in grpo hista; do
  $E --model runs/compare-$e/final --out runs/eval/$e.json
  $E --model runs/compare-$e/final --temperature 0.7 --k 8 --out runs/eval/$e-t07.json
done
O=results/eval-cpu-compare
$H eval compare runs/eval/{base,grpo,hista}.json --out $O/greedy.md
$H eval compare runs/eval/{base,grpo,hista}-t07.json --out $O/t07-avg8.md
$H eval compare runs/eval/{base,grpo,hista}-t07.json --metric pass@8 --out $O/t07-pass8.md
$H eval compare runs/eval/{grpo,hista}.json --out $O/greedy-hista-vs-grpo.md
$H eval compare runs/eval/{grpo,hista}-t07.json --out $O/t07-avg8-hista-vs-grpo.md
$H eval compare runs/eval/{grpo,hista}-t07.json --metric pass@8 --out $O/t07-pass8-hista-vs-grpo.md
