"""Issue 45, part 2: the blend of Hista and Numca against GRPO, Hista, Numca and the probe on a
setting's report half, beside MCS@1 and MCS@2 (README.md here, "Blend").

    python results/sveb-study/blend.py results/sveb-study/short/results-report-blend.json ...

For each results file (``sveb eval`` of the report half with grpo, hista, blend, numca and probe)
it prints a markdown table: MAE with its 95% bootstrap interval, ΔMAE of the blend against each
other estimator and against MCS@1 and MCS@2 (their expected errors per case) with a paired 95%
interval (problems resampled when they hold several cases, else cases; 2000 resamples, seed
0; a problem as ``sveb eval`` records it, problem ids sharing a prompt being one), and, from
``sveb report``'s rank summary, Spearman ρ and AUROC with their intervals.
"""

from __future__ import annotations

import sys

import numpy as np

from hista.sveb import bootstrap_ci, case_problems, mcs_error, rank_summary, read_results

METHODS = ("grpo", "hista", "blend", "numca", "probe")
LABELS = {"grpo": "GRPO", "hista": "Hista (default)", "blend": "**Blend** (w 0.5)", "numca": "Numca",
          "probe": "Probe", "MCS@1": "MCS@1", "MCS@2": "MCS@2"}


def interval(x: float, lo: float, hi: float, sign: bool = False) -> str:
    f = "{:+.3f}" if sign else "{:.3f}"
    star = "*" if sign and (lo > 0 or hi < 0) else ""
    return f"{f.format(x)} [{f.format(lo)}, {f.format(hi)}]{star}"


def table(path: str) -> str:
    cases = read_results(path)["cases"]
    problems = case_problems(cases)  # rows' problems: cases sharing a prompt are one
    clustered = len(set(problems)) < len(problems)
    errors = {m: np.array([abs(c.values[m] - c.target) for c in cases]) for m in METHODS}
    for n in (1, 2):
        errors[f"MCS@{n}"] = np.array([mcs_error(c.continuations, n) for c in cases])
    ranks = rank_summary(cases, list(METHODS), mcs=(1, 2))["rows"]
    others = [m for m in (*METHODS, "MCS@1", "MCS@2") if m != "blend"]
    head = ["Estimator", "MAE", *(f"Blend − {LABELS[m]}" for m in others), "ρ", "AUROC"]
    lines = [f"{path}: {len(cases)} cases of {len(set(problems))} problems; intervals resample "
             f"{'problems' if clustered else 'cases'}", "", "| " + " | ".join(head) + " |",
             "|" + " --- |" * len(head)]
    boot = dict(clusters=problems if clustered else None)
    for row in (*METHODS, "MCS@1", "MCS@2"):
        e = errors[row]
        cells = [LABELS[row], interval(e.mean(), *bootstrap_ci(e, **boot))]
        for other in others:
            if row != "blend":
                cells.append("")
                continue
            d = errors["blend"] - errors[other]
            cells.append(interval(d.mean(), *bootstrap_ci(d, **boot), sign=True))
        for stat in ("rho", "auroc"):
            r = ranks.get(row, {}).get(stat)
            cells.append(interval(r["value"], r["lo"], r["hi"]) if r else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(table(p) + "\n")
