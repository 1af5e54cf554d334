#!/usr/bin/env bash
# The study of when Hista beats GRPO (issue 12): rerun one setting from its committed cases,
# without generating anything.
#
#     results/sveb-study/study.sh results/sveb-study/short     # or .../long
#
# The cases' problems are split in two halves (seed 0): every choice (each sweep's best point)
# is made on the selection half only, and every reported number comes from the report half.
# Sweeps are staged: Hista's structure (layer, interval, stride) first, then its weights
# (alpha, k, power, clamp) around the structure picked; Numca's parser and reference switches.
# Three sweeps run on the selection half's cases alone and feed choices made across both
# settings (docs/estimators.md "Structure rule", "Probe" and "Blend"): the default profile's layer
# and interval, the probe's defaults and the blend's weight. The report tables then compare the
# defaults (Hista's structure rule, the paper profile, the probe) with GRPO, Numca and a PPO-N
# critic trained on the report half's own rollouts (hista critic train's defaults, lambda 1), and
# the blend with its members, the probe and MCS@1/MCS@2 (blend.md).
# Set HISTA to the hista command to use (default: hista on PATH) and PYTHON to a Python that
# imports hista (default: python on PATH).
set -euo pipefail
dir=${1:?usage: study.sh SETTING_DIR (holding cases.jsonl.gz)}
hista=${HISTA:-hista}
python=${PYTHON:-python}
cases="$dir/cases.jsonl.gz"
picked() { python -c "import json,sys; print(json.load(open(sys.argv[1]))['selection']['picked'])" "$1/sweep.json"; }

"$python" "$(dirname "$0")/describe.py" "$cases" > "$dir/describe.md"  # lengths, accuracy, nodes
"$hista" sveb split --cases "$cases" --out "$dir/split" --select-on 0.5 --seed 0
"$hista" sveb sweep --cases "$cases" --out "$dir/sweep-hista-structure" --select-on 0.5 --seed 0 --base hista \
    --grid 'layer=-1,-4,-8,-12,-16,-20;interval=10,25,50;stride=1,5'
structure=$(picked "$dir/sweep-hista-structure")
"$hista" sveb sweep --cases "$cases" --out "$dir/sweep-hista-weights" --select-on 0.5 --seed 0 --base "$structure" \
    --grid 'alpha=0.5,0.7,0.9;max_k=4,8,16,66;min_k=2;power=1,2;min_distance=0.1,5.0'
hista_best=$(picked "$dir/sweep-hista-weights")
"$hista" sveb sweep --cases "$cases" --out "$dir/sweep-numca" --select-on 0.5 --seed 0 --base numca \
    --grid 'parser=default,digits;merge_repeats=false,true;unreached=fallback,zero;answered=reward,table'
"$hista" sveb sweep --cases "$cases" --out "$dir/sweep-numca-reference" --select-on 0.5 --seed 0 \
    --base numca-reference --grid 'parser=default,digits;group_padding=true,false;state_value_rule=reference_sveb,macro'
numca_best=$(picked "$dir/sweep-numca")
"$hista" sveb sweep --cases "$dir/split/selection.jsonl" --out "$dir/sweep-hista-rule" --select-on 0.5 --seed 0 \
    --base hista --grid 'layer=-2,-4,-6,-8,-10,-12,-14;interval=5,8,10,12,15;stride=1'
"$hista" sveb sweep --cases "$dir/split/selection.jsonl" --out "$dir/sweep-probe" --select-on 0.5 --seed 0 \
    --base probe --grid 'layer=-1,-4,-8,-12,-16;alpha=0,0.7,0.9;ridge=10,100,1000,10000;offset=group_mean,none'
"$hista" sveb sweep --cases "$dir/split/selection.jsonl" --out "$dir/sweep-blend" --select-on 0.5 --seed 0 \
    --base blend --grid 'hista_weight=0,0.25,0.5,0.75,1'
"$hista" critic train --cases "$dir/split/report.jsonl" --mode ppo-n --lam 1.0 --out "$dir/split/critic-report"

# the tables: the report half only (the selection half's, for reference, beside them)
methods="grpo,numca,numca-reference,hista,hista-paper,hista-reference,probe,${numca_best}&label=Numca (selected),${hista_best}&label=Hista (selected)"
"$hista" sveb eval --cases "$dir/split/report.jsonl" --methods "$methods,ppo-n?lam=1" --critic "$dir/split/critic-report" \
    --out "$dir/results-report.json"
"$hista" sveb eval --cases "$dir/split/selection.jsonl" --methods "$methods" --out "$dir/results-selection.json"
# the blend of Hista and Numca (issue 45) against its members, the probe and MCS@1/MCS@2
"$hista" sveb eval --cases "$dir/split/report.jsonl" --methods grpo,hista,blend,numca,probe \
    --out "$dir/results-report-blend.json"
"$python" "$(dirname "$0")/blend.py" "$dir/results-report-blend.json" > "$dir/blend.md"
for part in report selection; do
    "$hista" sveb report --results "$dir/results-$part.json" --out "$dir/report-$part"
done
