"""The training study's two steps after training (README.md here; run.sh calls the first).

    python results/train-study/study.py finish runs/train-study/hista-s1 [--hista .venv/bin/hista]
    python results/train-study/study.py report [--seeds 0 1 2 3]

``finish``: the run's best-validation step (greedy accuracy on the validation problems, logged
by evaluation during training; ties go to the later step), ``hista eval`` of that checkpoint (the
base model when it is step 0) on the test problems, greedy and at temperature 0.7 with 8
samples, the small files copied to ``runs/RUN/`` here (``metrics.jsonl``, ``selection.json``,
``test-greedy.json``, ``test-t07.json``, written last), and the run's other checkpoints, its
``final/`` and the optimiser state of the kept one removed (each checkpoint holds 1.6 GB).

``report``: from ``runs/*/`` here, ``report.md`` (per estimator the mean test accuracy over
seeds with a seed-level 95% t-interval; paired differences against GRPO over seeds, and beside
them a problem-level interval from a bootstrap over test problems of the seed-averaged paired
difference; wall time per run) and ``curves.png`` (reward, validation accuracy, entropy and
completion length against the step: the mean over seeds with the range over seeds as a band).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUNS = HERE / "runs"
TEST = "builtin:arith?steps=2"
BASE_MODEL = "smollm2-135m-instruct"
EVALS = {"test-greedy.json": ["--limit", "200"],
         "test-t07.json": ["--limit", "50", "--temperature", "0.7", "--k", "8"]}
ESTIMATORS = ("grpo", "numca", "hista", "probe", "critic")
#: two-sided 95% quantiles of Student's t by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def read_rows(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl, the last one per step (a resumed run logs retrained steps again)."""
    rows: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["step"]] = {**rows.get(row["step"], {}), **row}
    return [rows[k] for k in sorted(rows)]


def validation(rows: list[dict]) -> dict[int, float]:
    """Step -> greedy validation accuracy."""
    out = {}
    for row in rows:
        keys = [k for k in row if k.startswith("eval/") and k.endswith("/avg@1")]
        if keys:
            out[row["step"]] = float(row[keys[0]])
    return out


def train_seconds(rows: list[dict]) -> float:
    """The run's training time: the sum of its steps' ``step_time`` (evaluations during training
    included), a step longer than 5x the run's median counted at the median (a process paused
    while something else had the machine, as during a CI check)."""
    times = np.array([float(r["step_time"]) for r in rows if r.get("step_time") is not None])
    if not len(times):
        return 0.0
    median = float(np.median(times))
    return float(np.where(times > 5 * median, median, times).sum())


def finish(run: Path, hista: str) -> None:
    rows = read_rows(run / "metrics.jsonl")
    val = validation(rows)
    if not val:
        raise SystemExit(f"{run}: no validation accuracy in metrics.jsonl")
    best = max(val, key=lambda step: (val[step], step))
    model = BASE_MODEL if best == 0 else str(run / f"checkpoint-{best}")
    if best and not (run / f"checkpoint-{best}").is_dir():
        raise SystemExit(f"{run}: the best validation step {best} has no checkpoint")
    test = run / "test"
    test.mkdir(exist_ok=True)
    for name, extra in EVALS.items():
        with open(test / f"{name}.log", "a") as log:
            subprocess.run([hista, "eval", "--model", model, "--suite", TEST, "--max-new-tokens", "96", "--device",
                            "cpu", "--out", str(test / name), *extra], check=True, cwd=ROOT, stdout=log, stderr=log)
    target = RUNS / run.name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(run / "metrics.jsonl", target / "metrics.jsonl")
    wall = train_seconds(rows)
    (target / "selection.json").write_text(json.dumps(
        {"run": run.name, "best_step": best, "model": model, "validation": val, "train_seconds": wall}, indent=1))
    for name in EVALS:  # test-t07.json last: run.sh takes it as the mark of a finished run
        shutil.copy(test / name, target / name)
    for folder in run.glob("checkpoint-*"):
        if folder.name != f"checkpoint-{best}":
            shutil.rmtree(folder)
    shutil.rmtree(run / "final", ignore_errors=True)
    for name in ("optimizer.pt", "scheduler.pt"):
        (run / f"checkpoint-{best}" / name).unlink(missing_ok=True)
    print(f"{run.name}: best validation {val[best]:.3f} at step {best}; test files in {target}")


# ---- report ----------------------------------------------------------------------------------

def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and seed-level 95% t-interval."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), float("nan"), float("nan")
    half = T95.get(len(x) - 1, 1.96) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def per_problem(path: Path) -> dict[str, float]:
    """Problem id -> mean reward over its samples."""
    data = json.loads(path.read_text())
    return {p["id"]: float(np.mean([s["reward"] for s in p["samples"]])) for p in data["problems"]}


def bootstrap(diffs: np.ndarray, seed: int = 0, n: int = 10_000) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), size=(n, len(diffs)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}"


def report(only: set[int] | None = None) -> None:
    runs: dict[str, dict[int, Path]] = {}
    for folder in sorted(RUNS.glob("*-s*")):
        name, seed = folder.name.rsplit("-s", 1)
        if (folder / "test-t07.json").is_file() and (only is None or int(seed) in only):
            runs.setdefault(name, {})[int(seed)] = folder
    order = [e for e in ESTIMATORS if e in runs]
    selection = {e: {s: json.loads((folder / "selection.json").read_text()) for s, folder in runs[e].items()}
                 for e in order}
    metrics = {"greedy": ("test-greedy.json", "avg"), "avg@8": ("test-t07.json", "avg"),
               "pass@8": ("test-t07.json", "pass")}

    def score(folder: Path, metric: str) -> float:
        file, kind = metrics[metric]
        if kind == "avg":  # from the problems, unrounded (the summary rounds to 3 decimals)
            return float(np.mean(list(per_problem(folder / file).values())))
        return float(json.loads((folder / file).read_text())["summary"]["overall"]["pass"]["8"]["mean"])

    seeds_flag = " --seeds " + " ".join(map(str, sorted(only))) if only else ""
    lines = ["# Training study: results", "",
             f"Generated by `python results/train-study/study.py report{seeds_flag}` from `runs/*/` here.", "",
             "## Test accuracy of the best-validation checkpoint (%)", "",
             "Mean over seeds with a seed-level 95% t-interval; greedy on 200 test problems, avg@8 and "
             "pass@8 at temperature 0.7 on the first 50.", "",
             "| estimator | seeds | greedy | avg@8 | pass@8 | best step (per seed) | train minutes (mean) |",
             "|---|---|---|---|---|---|---|"]
    for e in order:
        seeds = sorted(runs[e])
        cells = []
        for metric in metrics:
            m, lo, hi = interval([score(runs[e][s], metric) for s in seeds])
            cells.append(f"{pct(m)} [{pct(lo)}, {pct(hi)}]")
        sel = [selection[e][s] for s in seeds]
        steps = ", ".join(str(x["best_step"]) for x in sel)
        minutes = np.mean([x["train_seconds"] for x in sel]) / 60
        lines.append(f"| {e} | {','.join(map(str, seeds))} | {' | '.join(cells)} | {steps} | {minutes:.0f} |")
    all_seeds = sorted({s for e in order for s in runs[e]})
    lines += ["", "## Per seed: greedy test accuracy (%) and the best-validation step", "",
              "A best step of 0 means the base model was tested.", "",
              "| estimator | " + " | ".join(f"seed {s}" for s in all_seeds) + " |",
              "|---|" + "---|" * len(all_seeds)]
    for e in order:
        cells = []
        for s in all_seeds:
            if s not in runs[e]:
                cells.append("")
                continue
            cells.append(f"{pct(score(runs[e][s], 'greedy'))} (step {selection[e][s]['best_step']})")
        lines.append(f"| {e} | " + " | ".join(cells) + " |")
    if "grpo" in runs:
        lines += ["", "## Paired differences against GRPO (percentage points)", "",
                  "Over seeds: the mean of the per-seed differences with a t-interval (runs paired by seed: same "
                  "data order, same first rollouts). Problem-level: the per-problem difference averaged over the "
                  "paired seeds, bootstrapped over the test problems (10,000 resamples).", "",
                  "| estimator − GRPO | seeds | metric | over seeds | problem-level |", "|---|---|---|---|---|"]
        for e in order:
            if e == "grpo":
                continue
            seeds = sorted(set(runs[e]) & set(runs["grpo"]))
            if not seeds:
                continue
            for metric in ("greedy", "avg@8"):
                d = [score(runs[e][s], metric) - score(runs["grpo"][s], metric) for s in seeds]
                m, lo, hi = interval(d)
                file = metrics[metric][0]
                mine = [per_problem(runs[e][s] / file) for s in seeds]
                theirs = [per_problem(runs["grpo"][s] / file) for s in seeds]
                ids = sorted(mine[0])
                diffs = np.array([np.mean([a[i] - b[i] for a, b in zip(mine, theirs)]) for i in ids])
                plo, phi = bootstrap(diffs)
                lines.append(f"| {e} | {','.join(map(str, seeds))} | {metric} | {pct(m)} [{pct(lo)}, {pct(hi)}] | "
                             f"{pct(float(diffs.mean()))} [{pct(plo)}, {pct(phi)}] |")
    (HERE / "report.md").write_text("\n".join(lines) + "\n")
    plot(runs, order)
    print("\n".join(lines))


def plot(runs: dict[str, dict[int, Path]], order: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("reward", "train reward (5-step mean)", 5), ("val", "greedy validation accuracy", 1),
              ("entropy", "policy entropy (5-step mean)", 5), ("completions/mean_length",
                                                               "completion tokens (5-step mean)", 5)]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for e in order:
        for (key, title, window), ax in zip(panels, axes):
            curves = []
            for folder in runs[e].values():
                rows = read_rows(folder / "metrics.jsonl")
                if key == "val":
                    val = validation(rows)
                    steps, values = np.array(sorted(val)), np.array([val[k] for k in sorted(val)])
                else:
                    kept = [r for r in rows if key in r and "loss" in r]
                    steps = np.array([r["step"] for r in kept])
                    values = np.array([float(r[key]) for r in kept])
                    if window > 1 and len(values) >= window:
                        values = np.convolve(values, np.ones(window) / window, mode="valid")
                        steps = steps[window - 1:]
                curves.append((steps, values))
            n = min(len(v) for _, v in curves)
            steps = curves[0][0][:n]
            stack = np.stack([v[:n] for _, v in curves])
            line, = ax.plot(steps, stack.mean(0), label=f"{e} ({len(curves)} seeds)")
            ax.fill_between(steps, stack.min(0), stack.max(0), color=line.get_color(), alpha=0.15)
            ax.set_title(title)
            ax.set_xlabel("step")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("finish")
    f.add_argument("run", type=Path)
    f.add_argument("--hista", default=str(ROOT / ".venv" / "bin" / "hista"))
    r = sub.add_parser("report")
    r.add_argument("--seeds", type=int, nargs="+", help="report these seeds only (default: every finished run)")
    args = ap.parse_args()
    if args.command == "finish":
        finish(args.run, args.hista)
    else:
        report(set(args.seeds) if args.seeds else None)


if __name__ == "__main__":
    main()
