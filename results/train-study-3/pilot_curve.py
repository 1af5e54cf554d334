"""Pilot step 2's curve (PILOT.md): the GRPO run's train reward, completion length and entropy per
step, and its greedy validation accuracy and answer length every 10 steps, from pilot-grpo/ here.

    python results/train-study-3/pilot_curve.py    # pilot-grpo/curve.png and the table it prints
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import matplotlib

from hista.train.curves import read_metrics

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent / "pilot-grpo"


def validation() -> dict[int, tuple[float, float]]:
    """step -> (greedy accuracy, mean answer tokens) on the 100 validation problems; step 0 is
    the base model (pilot-base.md, candidate A)."""
    out = {0: (0.18, 171.0)}
    for path in sorted(HERE.glob("validation-step-*.json.gz")):
        with gzip.open(path, "rt") as fh:
            (bench,) = json.load(fh)["summary"]["benchmarks"].values()
        out[int(path.name.split("-")[2].split(".")[0])] = (bench["avg"]["mean"], bench["length"]["mean"])
    return out


def main() -> None:
    rows = [r for r in read_metrics(HERE / "metrics.jsonl") if "reward" in r]
    val = validation()
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(steps, [r["reward"] for r in rows], label="train reward (kept groups' rollouts)")
    axes[0].plot(sorted(val), [val[s][0] for s in sorted(val)], marker="o", label="greedy validation accuracy")
    axes[1].plot(steps, [r["completions/mean_length"] for r in rows], label="train completion tokens (sampled)")
    axes[1].plot(sorted(val), [val[s][1] for s in sorted(val)], marker="o", label="validation answer tokens (greedy)")
    axes[1].axhline(80, color="grey", linestyle=":", label="80 tokens (issue 65)")
    axes[2].plot(steps, [r["entropy"] for r in rows], label="entropy")
    for ax, title in zip(axes, ("accuracy", "length", "entropy")):
        ax.set_title(title)
        ax.set_xlabel("optimiser step")
        ax.legend()
    fig.suptitle("train-study-3 pilot, step 2: GRPO on candidate A (one explained addition to 40)")
    fig.tight_layout()
    fig.savefig(HERE / "curve.png", dpi=80)
    print("| step | greedy validation accuracy | validation answer tokens | train reward | train tokens |")
    print("|---|---|---|---|---|")
    by_step = {r["step"]: r for r in rows}
    for s in sorted(val):
        r = by_step.get(s, {})
        print(f"| {s} | {val[s][0]:.2f} | {val[s][1]:.0f} | {r.get('reward', float('nan')):.2f} | "
              f"{r.get('completions/mean_length', float('nan')):.0f} |")


if __name__ == "__main__":
    main()
