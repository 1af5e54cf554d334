"""Issue 64, part 2: the update-direction metrics of `hista sveb grad` beside each arm's training
outcome and SVEB figures, and the rank agreement of every metric with training (README.md here).

Reads sK-C.json / sK-C-steps.jsonl.gz (run.sh), sveb-sK-leak-free.json (sveb.sh), the study's
SVEB results (results/train-study-2/sveb-K/results-report.json, the paper protocol its arms were
chosen under) and its runs (greedy test accuracy per seed). Prints the table and the Kendall τ of
each metric with the training differences, with a 95% bootstrap interval: seeds are resampled
for training (paired with the arm's GRPO), problems for the grad metrics (paired with GRPO); the
SVEB figures are held fixed. Writes cosine.png (each estimator's paired Δcosine against GRPO; the
figure of docs/sveb.md "Update direction").

    python results/update-direction/analyse.py
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "train-study-2"))
from report import read_json_gz, runs, summary  # noqa: E402

from hista.sveb import rank_summary, read_results  # noqa: E402

#: label in methods.yaml -> (training arm, its paired GRPO arm, SVEB method of the study's results)
ARMS = {
    "Hista (as trained)": ("hista", "grpo", "hista"),
    "Numca (as trained)": ("numca", "grpo", "numca"),
    "Probe (as trained)": ("probe", "grpo", "probe"),
    "Numca (valid)": ("numca-valid", "grpo-rerun", None),
    "Hista (valid, rule 1)": (None, None, None),
    "Probe (valid)": (None, None, None),
}
SPEC = {}  # label -> spec, from methods.yaml
for line in (HERE / "methods.yaml").read_text().splitlines():
    if line.startswith("- "):
        spec = line[2:]
        SPEC[spec.split("label=")[1]] = spec
N_BOOT = 2000


def accuracy(setting: int) -> dict[str, dict[int, float]]:
    return {arm: {s: 100 * summary(read_json_gz(f / "test-greedy.json.gz"))["avg"]["mean"] for s, f in seeds.items()}
            for arm, seeds in runs(setting).items()}


def grad_prompts(setting: int, checkpoint: str) -> dict | None:
    """label -> metric -> per-prompt values (problems with a non-flat group), or None if not measured."""
    path = HERE / f"s{setting}-{checkpoint}-steps.jsonl.gz"
    if not path.exists():
        return None
    records = [json.loads(line) for line in gzip.open(path, "rt")]
    records = [r for r in records if any(s is not None for s in r["steps"]["GRPO"])]
    out = {}
    for label in records[0]["steps"]:
        out[label] = {}
        for metric in ("cosine", "adam", "top_share"):
            vals = [np.mean([s[metric] for s in r["steps"][label] if s is not None and metric in s]
                            or [np.nan]) for r in records]
            out[label][metric] = np.array(vals)
    return out


def sveb_columns(setting: int) -> dict[str, dict[str, float]]:
    """label -> {"paper ΔMAE", "leak-free ΔMAE", "ρ", "AUROC"} (ρ and AUROC leak-free, minus GRPO's)."""
    out: dict[str, dict[str, float]] = {label: {} for label in ARMS}
    study = json.load(open(HERE.parent / f"train-study-2/sveb-{setting}/results-report.json"))
    rows = study["summary"]["rows"]
    for label, (_, _, method) in ARMS.items():
        if method is not None:
            out[label]["paper ΔMAE"] = rows[method]["all"]["mae"] - rows["grpo"]["all"]["mae"]
    segments = HERE / f"segments-s{setting}.json"
    if segments.exists():
        seg = json.load(open(segments))["segments"]["methods"]
        for label in ARMS:
            out[label]["decisive right sign"] = seg[SPEC[label]]["sign"]
        out["GRPO"] = {"decisive right sign": seg[SPEC["GRPO"]]["sign"]}
    path = HERE / f"sveb-s{setting}-leak-free.json"
    if path.exists():
        free = read_results(path)
        rows = free["summary"]["rows"]
        grpo = SPEC["GRPO"]
        ranks = rank_summary(free["cases"], list(rows))["rows"]
        for label in ARMS:
            spec = SPEC[label]
            out[label]["leak-free ΔMAE"] = rows[spec]["all"]["mae"] - rows[grpo]["all"]["mae"]
            out[label]["Δρ"] = ranks[spec]["rho"]["value"] - ranks[grpo]["rho"]["value"]
            out[label]["ΔAUROC"] = ranks[spec]["auroc"]["value"] - ranks[grpo]["auroc"]["value"]
    return out


def kendall(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b."""
    n = len(x)
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if a == 0 and b == 0:
                continue
            if a == 0:
                tx += 1
            elif b == 0:
                ty += 1
            elif a == b:
                conc += 1
            else:
                disc += 1
    denom = np.sqrt((conc + disc + tx) * (conc + disc + ty))
    return float((conc - disc) / denom) if denom > 0 else float("nan")


def main() -> None:
    rng = np.random.default_rng(0)
    points = []  # (setting, label, training diffs per seed, metric values and resamplers)
    lines = []
    for setting in (1, 2):
        acc = accuracy(setting)
        sveb = sveb_columns(setting)
        grads = {c: grad_prompts(setting, c) for c in ("base", "mid")}
        lines.append(f"\n### Setting {setting}\n")
        head = ["arm", "training − GRPO (points)", "paper ΔMAE", "leak-free ΔMAE", "Δρ", "ΔAUROC",
                "decisive segments, right sign",
                "Δcosine (base)", "Δcosine (mid)", "ΔAdam (base)", "Δtop-decile share (base)",
                "Δtop-decile share (mid)"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for label, (arm, base, _) in ARMS.items():
            if label == "GRPO":
                continue
            diffs = None
            if arm is not None and arm in acc and base in acc:
                common = sorted(set(acc[arm]) & set(acc[base]))
                diffs = np.array([acc[arm][s] - acc[base][s] for s in common])
            cells = [label]
            if diffs is not None and len(diffs) > 1:
                half = 1.96 * diffs.std(ddof=1) / np.sqrt(len(diffs))
                cells.append(f"{diffs.mean():+.1f} ± {half:.1f} ({len(diffs)} seeds)")
            else:
                cells.append("—")
            for key in ("paper ΔMAE", "leak-free ΔMAE", "Δρ", "ΔAUROC"):
                cells.append(f"{sveb[label][key]:+.3f}" if key in sveb[label] else "—")
            key = "decisive right sign"
            cells.append(f"{100 * sveb[label][key]:.0f}%" if key in sveb[label] else "—")
            metric_diffs = {}
            for c, metric in (("base", "cosine"), ("mid", "cosine"), ("base", "adam"), ("base", "top_share"),
                              ("mid", "top_share")):
                g = grads[c]
                if g is None or label not in g or np.isnan(g[label][metric]).all():
                    cells.append("—")
                    continue
                d = g[label][metric] - g["GRPO"][metric]
                metric_diffs[f"Δ{metric} ({c})"] = d
                boots = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(N_BOOT)]
                cells.append(f"{d.mean():+.4f} [{np.quantile(boots, 0.025):+.4f}, {np.quantile(boots, 0.975):+.4f}]")
            lines.append("| " + " | ".join(cells) + " |")
            if diffs is not None:
                points.append((setting, label, diffs, sveb[label], metric_diffs))
    print("\n".join(lines))
    print(f"\n### Rank agreement with training ({len(points)} arm × setting points)\n")
    print("| metric (oriented: higher = predicted better) | points | Kendall τ | 95% interval |\n|---|---|---|---|")
    fixed = {"−paper ΔMAE": ("paper ΔMAE", -1), "−leak-free ΔMAE": ("leak-free ΔMAE", -1), "Δρ": ("Δρ", 1),
             "ΔAUROC": ("ΔAUROC", 1), "decisive segments, right sign": ("decisive right sign", 1)}
    # the top-decile share is a secondary metric of the design; its τ was not pre-registered
    for name in [*fixed, "Δcosine (base)", "Δcosine (mid)", "Δadam (base)", "Δtop_share (base)", "Δtop_share (mid)"]:
        if name in fixed:
            key, sign = fixed[name]
            have = [p for p in points if key in p[3]]
            x = np.array([sign * p[3][key] for p in have])
        else:
            have = [p for p in points if name in p[4]]
            x = np.array([p[4][name].mean() for p in have])
        if len(have) < 3:
            print(f"| {name} | {len(have)} | — | — |")
            continue
        tau = kendall(x, np.array([p[2].mean() for p in have]))
        boots = []
        for _ in range(N_BOOT):
            t = np.array([p[2][rng.integers(0, len(p[2]), len(p[2]))].mean() for p in have])
            xb = x if name in fixed else np.array([p[4][name][rng.integers(0, len(p[4][name]), len(p[4][name]))].mean()
                                                   for p in have])
            boots.append(kendall(xb, t))
        lo, hi = np.nanquantile(boots, [0.025, 0.975])
        print(f"| {name} | {len(have)} | {tau:+.2f} | [{lo:+.2f}, {hi:+.2f}] |")
    plot()


def plot() -> None:
    """cosine.png: each estimator's cosine with the reference minus GRPO's on the same groups
    (paired; 95% interval over problems), per setting and checkpoint measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(s, c) for s in (1, 2) for c in ("base", "mid") if (HERE / f"s{s}-{c}.json").exists()]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.4), squeeze=False)
    for ax, (s, c) in zip(axes[0], panels):
        summ = json.load(open(HERE / f"s{s}-{c}.json"))
        names = [n for n in summ["estimators"] if n != summ["baseline"]]
        diffs = [summ["estimators"][n]["cosine"]["diff"] for n in names]
        means = [d["mean"] for d in diffs]
        err = [[m - d["lo"] for m, d in zip(means, diffs)], [d["hi"] - m for m, d in zip(means, diffs)]]
        ax.errorbar(means, range(len(names)), xerr=err, fmt="o", capsize=3)
        ax.axvline(0, color="grey", lw=0.8, ls="--")
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"cosine with the true gradient − {summ['baseline']}'s", fontsize=9)
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))  # a wide interval must not crowd the labels
        ax.set_title(f"setting {s}, {'start of training' if c == 'base' else 'GRPO step 20'}", fontsize=9)
    fig.tight_layout()
    fig.savefig(HERE / "cosine.png", dpi=120)


if __name__ == "__main__":
    main()
