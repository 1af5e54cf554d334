"""The statistics and tables of a seed-paired training study (train-study-2, train-study-3), shared
by their report.py scripts: per arm the per-seed table of the primary metric (greedy accuracy of
the final checkpoint on the test problems), each arm's mean with a seed-level 95% t-interval, the
paired difference against GRPO over the seeds both arms have (mean, 95% t-interval, p, Holm over
the comparisons, the MDE at 80% power from the measured SD of the differences), the secondary
metrics, and the curves (the mean over seeds with the range over seeds as a band). A run counts
once complete (its test-t07.json.gz written). Student's t is computed here (no scipy).
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Sequence

from hista.train import read_metrics

# ---- Student's t without scipy ------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf2(t: float, df: int) -> float:
    """Two-sided p-value of Student's t with ``df`` degrees of freedom."""
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 0.5) of Student's t, by bisection on :func:`t_sf2`."""
    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf2(mid, df) / 2 > 1 - p else (lo, mid)
    return (lo + hi) / 2


# ---- reading ------------------------------------------------------------------------------------

def read_json_gz(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def summary(results: dict) -> dict:
    (bench,) = results["summary"]["benchmarks"].values()
    return bench


def runs(root: Path, prefix: str = "") -> dict[str, dict[int, Path]]:
    """arm -> seed -> folder of the complete runs (test-t07.json.gz written) under ``root`` named
    PREFIX + ARM + "-seed" + SEED."""
    out: dict[str, dict[int, Path]] = {}
    for folder in sorted(root.glob(f"{prefix}*-seed*")):
        if (folder / "test-t07.json.gz").exists():
            arm, seed = folder.name[len(prefix):].rsplit("-seed", 1)
            out.setdefault(arm, {})[int(seed)] = folder
    return out


# ---- statistics ---------------------------------------------------------------------------------

def mean_ci(values: list[float]) -> tuple[float, float, float]:
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, float("nan"), float("nan")
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return m, m - half, m + half


def paired(a: dict[int, float], b: dict[int, float]) -> dict:
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    n = len(diffs)
    m, lo, hi = mean_ci(diffs)
    if n < 2:
        return {"n": n, "mean": m, "lo": lo, "hi": hi, "sd": float("nan"), "p": float("nan"), "mde": float("nan")}
    sd = math.sqrt(sum((d - m) ** 2 for d in diffs) / (n - 1))
    p = t_sf2(m / (sd / math.sqrt(n)), n - 1) if sd > 0 else (0.0 if m else 1.0)
    mde = (t_quantile(0.975, n - 1) + t_quantile(0.80, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": m, "lo": lo, "hi": hi, "sd": sd, "p": p, "mde": mde}


def holm(ps: dict[str, float]) -> dict[str, float]:
    """Holm-adjusted p-values."""
    order = sorted(ps, key=ps.get)
    out, running = {}, 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * ps[key]))
        out[key] = running
    return out


# ---- the report ---------------------------------------------------------------------------------

def pct(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{100 * v:.1f}"


def setting_report(root: Path, prefix: str, heading: str, curves: Path, arms_first: Sequence[str]) -> list[str]:
    """The tables of one setting's runs (``runs(root, prefix)``; the base model's evaluations in
    ROOT/PREFIX + "base"), under ``heading``, and its curves into ``curves``."""
    found = runs(root, prefix)
    base = root / f"{prefix}base"
    lines = [heading, ""]
    if not found:
        return lines + ["No complete run yet.", ""]
    arms = [a for a in arms_first if a in found] + sorted(set(found) - set(arms_first))
    primary = {a: {s: summary(read_json_gz(f / "test-greedy.json.gz"))["avg"]["mean"] for s, f in found[a].items()}
               for a in arms}
    seeds = sorted({s for a in arms for s in found[a]})
    if (base / "test-greedy.json.gz").exists():
        b = summary(read_json_gz(base / "test-greedy.json.gz"))
        bt = summary(read_json_gz(base / "test-t07.json.gz"))
        lines += [f"Base model: greedy test accuracy {pct(b['avg']['mean'])}% [{pct(b['avg']['lo'])}, "
                  f"{pct(b['avg']['hi'])}] ({b['problems']} problems); avg@8 {pct(bt['avg']['mean'])}%, "
                  f"pass@8 {pct(bt['pass']['8']['mean'])}% on the first {bt['problems']}.", ""]
    lines += ["**Primary metric** (greedy test accuracy of the final checkpoint, %), per seed:", "",
              "| seed | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
    for s in seeds:
        lines.append(f"| {s} | " + " | ".join(pct(primary[a][s]) if s in primary[a] else "" for a in arms) + " |")
    lines += ["", "| arm | seeds | mean [95% t-interval over seeds] |", "|---|---|---|"]
    for a in arms:
        m, lo, hi = mean_ci(list(primary[a].values()))
        lines.append(f"| {a} | {len(primary[a])} | {pct(m)} [{pct(lo)}, {pct(hi)}] |")
    if "grpo" in primary:
        comps = {a: paired(primary[a], primary["grpo"]) for a in arms if a != "grpo"}
        adjusted = holm({a: c["p"] for a, c in comps.items() if not math.isnan(c["p"])})
        lines += ["", "**Paired differences against GRPO** (points; seeds both arms finished):", "",
                  "| arm − GRPO | seeds | mean [95% t-interval] | p | p (Holm) | SD of differences "
                  "| MDE (80%, α 0.05) |",
                  "|---|---|---|---|---|---|---|"]
        for a, c in comps.items():
            lines.append(f"| {a} | {c['n']} | {pct(c['mean'])} [{pct(c['lo'])}, {pct(c['hi'])}] | "
                         f"{c['p']:.3f} | {adjusted.get(a, float('nan')):.3f} | {pct(c['sd'])} | {pct(c['mde'])} |")
    lines += ["", "**Secondary metrics** (means over seeds):", "",
              "| arm | validation AUC (steps 10-40) | avg@8 (T 0.7) | pass@8 | test response tokens (greedy) "
              "| train reward, last 10 steps | entropy, last 10 steps | minutes per run |", "|---" * 8 + "|"]
    for a in arms:
        cols: dict[str, list[float]] = {}
        for f in found[a].values():
            rows = read_metrics(f / "metrics.jsonl")
            val = [v for r in rows for k, v in r.items()
                   if k.startswith("eval/") and k.endswith("/avg@1") and r["step"] > 0]
            last = [r for r in rows if "reward" in r][-10:]
            t07 = summary(read_json_gz(f / "test-t07.json.gz"))
            greedy = summary(read_json_gz(f / "test-greedy.json.gz"))
            for key, value in (("auc", sum(val) / len(val) if val else float("nan")), ("avg8", t07["avg"]["mean"]),
                               ("pass8", t07["pass"]["8"]["mean"]), ("len", greedy["length"]["mean"]),
                               ("reward", sum(r["reward"] for r in last) / len(last)),
                               ("entropy", sum(r["entropy"] for r in last) / len(last)),
                               ("minutes", sum(r.get("step_time", 0.0) for r in rows) / 60)):
                cols.setdefault(key, []).append(value)
        avg = {k: sum(v) / len(v) for k, v in cols.items()}
        lines.append(f"| {a} | {pct(avg['auc'])} | {pct(avg['avg8'])} | {pct(avg['pass8'])} | {avg['len']:.1f} | "
                     f"{avg['reward']:.2f} | {avg['entropy']:.3f} | {avg['minutes']:.1f} |")
    lines += ["", f"![curves of {heading.lstrip('# ').lower()}]({curves.name})", ""]
    plot(found, arms, curves, f"{heading.lstrip('# ')}: mean over seeds, band = range over seeds")
    return lines


def plot(found: dict[str, dict[int, Path]], arms: list[str], path: Path, heading: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("reward", "train reward (first round)"), ("eval", "greedy validation accuracy"),
              ("entropy", "entropy"), ("completions/mean_length", "completion tokens"))
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for a in arms:
        series: dict[str, dict[int, list[float]]] = {key: {} for key, _ in panels}
        for f in found[a].values():
            for r in read_metrics(f / "metrics.jsonl"):
                for key, _ in panels:
                    value = next((v for k, v in r.items() if k.startswith("eval/") and k.endswith("/avg@1")), None) \
                        if key == "eval" else r.get(key)
                    if value is not None:
                        series[key].setdefault(r["step"], []).append(value)
        for ax, (key, title) in zip(axes, panels):
            steps = sorted(series[key])
            if not steps:
                continue
            mean = [sum(series[key][s]) / len(series[key][s]) for s in steps]
            line, = ax.plot(steps, mean, label=f"{a} ({len(found[a])} seeds)", marker="o" if key == "eval" else None)
            ax.fill_between(steps, [min(series[key][s]) for s in steps], [max(series[key][s]) for s in steps],
                            color=line.get_color(), alpha=0.15)
            ax.set_title(title)
            ax.set_xlabel("optimiser step")
    axes[0].legend()
    fig.suptitle(heading)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
