"""Plot reward curves of training runs and print their summaries.

    python scripts/plot_rewards.py --out results/train.png GRPO=runs/a/metrics.jsonl Hista=runs/b/metrics.jsonl
"""

import argparse

from hista.train import plot_reward_curves, read_metrics, reward_summary

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("runs", nargs="+", metavar="LABEL=METRICS_JSONL")
parser.add_argument("--out", required=True, help="PNG to write")
parser.add_argument("--window", type=int, default=10, help="moving-average window (default: %(default)s)")
args = parser.parse_args()
runs = dict(item.split("=", 1) for item in args.runs)
for label, path in runs.items():
    print(label, reward_summary(read_metrics(path)))
print("wrote", plot_reward_curves(runs, args.out, window=args.window))
