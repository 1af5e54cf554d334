"""Accuracy of a policy per task setting (difficulty calibration, SPEC §7).

    python bench/difficulty.py [--model smollm2-135m-instruct] [--problems 8] [--rollouts 8]
        [--specs "builtin:arith?steps=1,gym:chain_sum?max_terms=2"] [--split test]

For each task spec it samples rollouts with the rollout engine, verifies them and prints the mean
accuracy with the fraction of problems whose accuracy lies in [0.1, 0.8] (the paper's filter)
and the share of the problems whose gold answer is the most common one (what a policy that always
gives that answer scores), and at the end a Markdown table of them. Specs are separated by commas outside their options
(a spec starts with its source prefix, e.g. ``gym:`` or ``builtin:``).
"""

from __future__ import annotations

import argparse
import collections
import time

from arguments import POSITIVE, TEMPERATURE, checked, comma_list, seed

from hista import tasks
from hista.models import load
from hista.rollout import GenerateEngine, SamplingConfig
from hista.rollout.sample import sample_groups

DEFAULT_SPECS = ",".join(f"builtin:arith?{s}" for s in (
    "style=expr&steps=1&max_value=10", "style=expr&steps=2&max_value=10", "style=expr&steps=3&max_value=10",
    "style=plain&steps=1&max_value=10", "style=plain&steps=2&max_value=10", "style=word&steps=1&max_value=10"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--problems", type=POSITIVE, default=8)
    ap.add_argument("--rollouts", type=POSITIVE, default=8)
    ap.add_argument("--max-new-tokens", type=POSITIVE, default=128)
    ap.add_argument("--temperature", type=TEMPERATURE, default=0.7)
    ap.add_argument("--specs", type=comma_list(str), default=DEFAULT_SPECS)
    ap.add_argument("--split", default="test", choices=("train", "test", "validation"))
    ap.add_argument("--seed", type=seed, default=0)
    args = ap.parse_args()
    for spec in args.specs:
        checked(ap, tasks.check_spec, spec)

    lm = checked(ap, load, args.model)
    engine = checked(ap, GenerateEngine, lm, SamplingConfig(temperature=args.temperature,
                                                            max_new_tokens=args.max_new_tokens))
    rows = []
    for spec in args.specs:
        problems = tasks.load(spec, n=args.problems, seed=args.seed, split=args.split)
        start = time.time()
        groups = sample_groups(engine, problems, args.rollouts, seed=args.seed, progress=False)
        accs = [float(g.rewards.mean()) for g in groups]
        in_range = sum(0.1 <= a <= 0.8 for a in accs) / len(accs)
        golds = collections.Counter(p.get("meta", {}).get("gold") or p["answer"] for p in problems)
        constant = golds.most_common(1)[0][1] / len(problems)
        rows.append((spec, sum(accs) / len(accs), in_range, constant, time.time() - start))
        print(f"{spec:48s} accuracy {rows[-1][1]:.3f}  in[0.1,0.8] {in_range:.2f}  most common answer {constant:.2f}  "
              f"per-problem {' '.join(f'{a:.2f}' for a in accs)}  ({rows[-1][4]:.0f}s)", flush=True)
    print(f"\n{args.problems} problems x {args.rollouts} rollouts per spec ({args.split} split, seed {args.seed}), "
          f"temperature {args.temperature}, max {args.max_new_tokens} new tokens, model {lm.name}\n")
    print("| task | accuracy | problems in [0.1, 0.8] | most common answer |\n|---|---|---|---|")
    for spec, accuracy, in_range, constant, _ in rows:
        print(f"| `{spec}` | {accuracy:.3f} | {in_range:.2f} | {constant:.2f} |")


if __name__ == "__main__":
    main()
