"""Accuracy of a policy on `builtin:arith` per difficulty setting (calibration, SPEC §7).

    python bench/arith_difficulty.py [--model smollm2-135m-instruct] [--problems 8] [--rollouts 8]
        [--settings "steps=1&style=plain,steps=2&style=plain,steps=1,steps=2"]

For each setting it samples rollouts with the rollout engine, verifies them and prints the mean
accuracy with the fraction of problems whose accuracy lies in [0.1, 0.8] (the paper's filter).
"""

from __future__ import annotations

import argparse
import time

from arguments import POSITIVE, TEMPERATURE, checked, comma_list, seed

from hista import tasks
from hista.models import load
from hista.rollout import GenerateEngine, SamplingConfig
from hista.rollout.sample import sample_groups

DEFAULT_SETTINGS = ("style=expr&steps=1&max_value=10,style=expr&steps=2&max_value=10,style=expr&steps=3&max_value=10,"
                    "style=plain&steps=1&max_value=10,style=plain&steps=2&max_value=10,style=word&steps=1&max_value=10")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--problems", type=POSITIVE, default=8)
    ap.add_argument("--rollouts", type=POSITIVE, default=8)
    ap.add_argument("--max-new-tokens", type=POSITIVE, default=128)
    ap.add_argument("--temperature", type=TEMPERATURE, default=0.7)
    ap.add_argument("--settings", type=comma_list(str), default=DEFAULT_SETTINGS)
    ap.add_argument("--seed", type=seed, default=0)
    args = ap.parse_args()
    for setting in args.settings:
        checked(ap, tasks.check_spec, f"builtin:arith?{setting}")

    lm = checked(ap, load, args.model)
    engine = checked(ap, GenerateEngine, lm, SamplingConfig(temperature=args.temperature,
                                                            max_new_tokens=args.max_new_tokens))
    rows = []
    for setting in args.settings:
        spec = f"builtin:arith?{setting}"
        problems = tasks.load(spec, n=args.problems, seed=args.seed)
        start = time.time()
        groups = sample_groups(engine, problems, args.rollouts, seed=args.seed, progress=False)
        accs = [float(g.rewards.mean()) for g in groups]
        in_range = sum(0.1 <= a <= 0.8 for a in accs) / len(accs)
        rows.append((setting, sum(accs) / len(accs), in_range, time.time() - start))
        print(f"{setting:32s} accuracy {rows[-1][1]:.3f}  in[0.1,0.8] {in_range:.2f}  "
              f"per-problem {' '.join(f'{a:.2f}' for a in accs)}  ({rows[-1][3]:.0f}s)", flush=True)
    print(f"\n{args.problems} problems x {args.rollouts} rollouts per setting, temperature {args.temperature}, "
          f"max {args.max_new_tokens} new tokens, model {lm.name}")


if __name__ == "__main__":
    main()
