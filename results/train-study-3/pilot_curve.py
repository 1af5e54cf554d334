"""Pilot step 2's curve (PILOT.md): a candidate's GRPO run, its train reward, completion length
and entropy per step, and its greedy validation accuracy and answer length every 10 steps, from
pilot-grpo-KEY/ here (step 0 from validation-step-0.json.gz there: step 1's greedy evaluation of
the same 100 problems; candidate A's was not kept, its figures are pilot-base.md's).

    python results/train-study-3/pilot_curve.py KEY    # pilot-grpo-KEY/curve.png and the table it prints

KEY is a candidate of candidates.txt, or CANDIDATE-NAME for another run of it (pilot-grpo-E-NAME/).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import matplotlib

from hista.train import read_metrics

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KEY = sys.argv[1] if len(sys.argv) > 1 else "A"
HERE = Path(__file__).resolve().parent / f"pilot-grpo-{KEY}"
SPEC = dict(line.split(None, 1) for line in (HERE.parent / "candidates.txt").read_text().splitlines()
            if line.strip())[KEY.split("-")[0]]  # a second run of a candidate: KEY-NAME


def validation() -> dict[int, tuple[float, float]]:
    """step -> (greedy accuracy, mean answer tokens) on the 100 validation problems; step 0 is
    the base model."""
    out = {0: (0.18, 171.0)} if KEY == "A" else {}  # candidate A: pilot-base.md
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
    fig.suptitle(f"train-study-3 pilot, step 2: GRPO on candidate {KEY} ({SPEC.strip()})", fontsize=9)
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
