# train-study-3's arms (DESIGN.md): the recipe overrides of each arm, sourced by run.sh.
# GRPO and Hista (its default profile) are fixed by issue 65; the third arm is the best of Numca,
# the probe and the blend on the selection half of this setting's leak-free SVEB cases (pilot
# step 3, PILOT.md). Nothing is tuned: every estimator trains at its default.
declare -A ARM_ARGS=(
  [grpo]="advantage_estimator.name=grpo"
  [hista]="advantage_estimator.name=hista"
  [probe]="advantage_estimator.name=probe"   # pilot step 3: the best of the three on the SVEB selection half
)
DEFAULT_ARMS="grpo hista probe"
# every arm: 30 optimiser steps, not recipe-3.yaml's 40 (PILOT.md amendment 7: GRPO's greedy
# validation share reached 0.93 at step 40 of the fixed-reading pilot, 0.84 at step 30)
COMMON_ARGS="trl.max_steps=30"
DEFAULT_SEEDS="0 1 2 3 4 5 6 7"
