"""The pilot's curves and tables from the runs' metrics (README.md here).

    python results/train-pilot/curves.py

Reads ``runs/*.jsonl`` here (each run's ``metrics.jsonl``, copied by ``run.sh``) and writes
``curves.png`` (greedy validation accuracy, train reward of the first generation round,
completion length and seconds per step against the optimiser step, one line per run) and prints
per run: validation accuracy at each evaluation, the train reward averaged over blocks of 10
steps, and the median seconds per step.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hista.train import read_metrics  # noqa: E402

HERE = Path(__file__).resolve().parent


def accuracy(row: dict):
    return next((v for k, v in row.items() if k.startswith("eval/") and k.endswith("/avg@1")), None)


def main() -> None:
    runs = {path.stem: read_metrics(path) for path in sorted((HERE / "runs").glob("*.jsonl"))}
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for name, rows in runs.items():
        evals = [(r["step"], accuracy(r)) for r in rows if accuracy(r) is not None]
        train = [r for r in rows if "reward" in r]
        axes[0].plot(*zip(*evals), marker="o", label=name)
        axes[1].plot([r["step"] for r in train], [r["reward"] for r in train], label=name)
        axes[2].plot([r["step"] for r in train], [r["completions/mean_length"] for r in train], label=name)
        axes[3].plot([r["step"] for r in train], [r["step_time"] for r in train], label=name)
        blocks = {}
        for r in train:
            blocks.setdefault((r["step"] - 1) // 10, []).append(r["reward"])
        print(f"{name}: validation accuracy " + ", ".join(f"step {s}: {100 * a:.1f}" for s, a in evals))
        print("  train reward per 10 steps: " + ", ".join(f"{np.mean(v):.2f}" for _, v in sorted(blocks.items())))
        print(f"  median seconds per step: {np.median([r['step_time'] for r in train]):.0f}; "
              f"steps {train[-1]['step'] if train else 0}")
    for ax, title in zip(axes, ("greedy validation accuracy", "train reward (first round)",
                                "mean completion tokens", "seconds per step")):
        ax.set_title(title)
        ax.set_xlabel("optimiser step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=90)


if __name__ == "__main__":
    main()
