"""Reward curves of training runs from their ``metrics.jsonl`` files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Union

import numpy as np


def read_metrics(path: Union[str, Path]) -> list[dict]:
    """The logged steps of one run (``metrics.jsonl`` written by ``hista train``), one dict
    per optimiser step; a resumed run keeps the last row of each step."""
    rows: dict[int, dict] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[int(row["step"])] = row
    return [rows[k] for k in sorted(rows)]


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` values (fewer at the start)."""
    cumsum = np.cumsum(np.insert(values.astype(float), 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (cumsum[idx] - cumsum[lo]) / (idx - lo)


def reward_summary(rows: list[dict], key: str = "reward", last: int = 25) -> dict:
    """Mean of ``key`` over the first and the last ``last`` steps and over all steps."""
    values = np.array([r[key] for r in rows if key in r], dtype=float)
    return {"steps": len(values), "mean": float(values.mean()), f"first{last}": float(values[:last].mean()),
            f"last{last}": float(values[-last:].mean())}


def plot_reward_curves(runs: Mapping[str, Union[str, Path]], out: Union[str, Path], window: int = 10,
                       key: str = "reward") -> Path:
    """Plot ``key`` per step (faint) and its ``window``-step moving average for each labelled
    run into a PNG, with the run's evaluations during training (every logged
    ``eval/<benchmark>/avg@k``) as dashed lines with markers in the run's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, path in runs.items():
        rows = read_metrics(path)
        steps = np.array([r["step"] for r in rows if key in r])
        values = np.array([r[key] for r in rows if key in r], dtype=float)
        (line,) = ax.plot(steps, moving_average(values, window), label=f"{label} ({window}-step mean)")
        ax.plot(steps, values, color=line.get_color(), alpha=0.2, linewidth=0.8)
        evaluated = sorted({k for r in rows for k in r if k.startswith("eval/") and "/avg@" in k})
        for name, marker in zip(evaluated, "osD^v<>"):
            points = [(r["step"], r[name]) for r in rows if r.get(name) is not None]
            ax.plot(*zip(*points), linestyle="--", marker=marker, markersize=4, color=line.get_color(),
                    label=f"{label} {name}")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel(f"{key} per step; eval accuracy")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
