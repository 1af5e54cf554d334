#!/usr/bin/env bash
# PPO critics on SVEB (issue 13): the paper's Table 1 (GRPO, PPO-1 and PPO-N at λ 0.95 and 1.0),
# Table 4 with the PPO-N rows beside Numca and Hista, and Figure 2, on the 155 short cases of
# the SVEB study (results/sveb-study/short: the embedded SmolLM2-135M-Instruct, one-step
# arithmetic and multiple choice, G 16, M 16, 96 tokens), without generating anything.
#
#     results/sveb-critic/run.sh [OUT]        # OUT default: runs/sveb-critic
#
# The critics train with hista critic train's defaults (the last 2 decoder layers, the norm and
# the head; 4 epochs, lr 1e-4, batch 8, seed 0) except --folds 2: PPO-1 is cross-fitted in two
# halves of the problems, which keeps the run near an hour on 2 CPU cores (5 folds would train
# 4/5 of the data 5 times per λ). No setting was tuned: the numbers are the first and only run.
# Set HISTA to the hista command to use (default: hista on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-runs/sveb-critic}
hista=${HISTA:-hista}
mkdir -p "$out"
gzip -dc "$here/../sveb-study/short/cases.jsonl.gz" > "$out/cases.jsonl"
"$hista" critic train --cases "$out/cases.jsonl" --mode ppo-1,ppo-n --lam 0.95,1.0 --folds 2 --out "$out/critics"
"$hista" sveb eval --cases "$out/cases.jsonl" --critic "$out/critics" --out "$out/results.json" \
    --methods 'grpo,numca,hista,ppo-1?lam=0.95,ppo-1?lam=1,ppo-n?lam=0.95,ppo-n?lam=1'
"$hista" sveb report --results "$out/results.json" --out "$out/report"
