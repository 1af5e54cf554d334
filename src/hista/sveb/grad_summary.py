"""Summaries of ``hista sveb grad`` (docs/sveb.md "Update direction"): each metric's mean over
prompts (a prompt's value: the mean over its non-flat groups) with a 95% bootstrap interval over
prompts, the paired difference against the baseline (GRPO) on the same groups, and the reference's
split-half cosine; OUT/grad.json (what a study reads) and OUT/grad.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..bootstrap import resampled_means
from ..jsonio import write_atomic

METRICS = ("cosine", "adam", "top_share", "norm", "differ")
N_BOOT = 2000
#: a split-half cosine below this says the reference is mostly noise (grad.md warns; docs/sveb.md)
NOISY = 0.1


def _interval(values: np.ndarray, seed: int) -> dict:
    means = resampled_means(values, N_BOOT, np.random.default_rng(seed))
    return {"mean": float(values.mean()), "lo": float(np.quantile(means, 0.025)),
            "hi": float(np.quantile(means, 0.975))}


def per_prompt(records: Sequence[dict], name: str, metric: str) -> np.ndarray:
    """A value per prompt with a non-flat group: the metric's mean over those groups."""
    out = []
    for r in records:
        xs = [s[metric] for s in r["steps"][name] if s is not None]
        if xs:
            out.append(float(np.mean(xs)))
    return np.array(out)


def summarise(records: Sequence[dict], names: Sequence[str], baseline: Optional[str] = None, *,
              seed: int = 0) -> dict:
    """Per estimator and metric: mean and interval over prompts; against ``baseline`` (default:
    the first name), the paired difference (mean and interval)."""
    baseline = baseline if baseline is not None else names[0]
    used = [r for r in records if any(s is not None for s in r["steps"][baseline])]
    # a problem with a half whose rollouts all earned one reward has no split-half cosine (None)
    split = np.array([r["split_half"] for r in used if r["split_half"] is not None])
    summary = {"prompts": len(used), "prompts_flat": len(records) - len(used),
               "groups": int(sum(s is not None for r in used for s in r["steps"][baseline])),
               "baseline": baseline,
               "split_half": _interval(split, seed) if len(split) else None,
               "estimators": {}}
    if not used:
        return summary
    for name in names:
        entry = {}
        for metric in METRICS:
            if any(s is not None and metric not in s for r in used for s in r["steps"][name]):
                continue  # not measured (adam off)
            values = per_prompt(used, name, metric)
            entry[metric] = _interval(values, seed)
            if name != baseline:
                entry[metric]["diff"] = _interval(values - per_prompt(used, baseline, metric), seed)
        summary["estimators"][name] = entry
    return summary


def table(summary: dict) -> str:
    """Markdown: a row per estimator, cosine and Adam cosine with intervals and paired
    differences against the baseline, top-decile share, step norm and the share of tokens whose
    advantage differs from the baseline's."""
    def cell(x: dict) -> str:
        return f"{x['mean']:.4f} [{x['lo']:.4f}, {x['hi']:.4f}]"

    def diff(x: dict) -> str:
        d = x.get("diff")
        star = "*" if d and (d["lo"] > 0 or d["hi"] < 0) else ""
        return "—" if d is None else f"{d['mean']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]{star}"

    head = (f"{summary['prompts']} prompts ({summary['prompts_flat']} left out: no group with mixed rewards and a "
            "non-zero reference), "
            f"{summary['groups']} groups; the reference's split-half cosine "
            + (cell(summary["split_half"]) if summary["split_half"] else "—") + ".")
    if not summary["estimators"]:
        return head + " Every group's rewards were equal: there is no step to measure.\n"
    if summary["split_half"] is not None and summary["split_half"]["mean"] < NOISY:
        head += (f" **The reference is mostly sampling noise** (split-half below {NOISY}): the cosines "
                 "below cannot be read. Measure on problems the model solves sometimes (a training pool "
                 "filtered to a pass-rate band), or with more groups.")
    adam = any("adam" in e for e in summary["estimators"].values())
    b = summary["baseline"]
    lines = [head, "",
             f"| estimator | cosine | Δ vs {b} |" + (" Adam cosine | Δ |" if adam else "")
             + f" top-decile share | step norm | tokens ≠ {b} |",
             "|---|---|---|" + ("---|---|" if adam else "") + "---|---|---|"]
    for name, e in summary["estimators"].items():
        differ = f"{e['differ']['mean']:.0%}" if "differ" in e else "—"
        lines.append(f"| {name} | {cell(e['cosine'])} | {diff(e['cosine'])} |"
                     + (f" {cell(e['adam'])} | {diff(e['adam'])} |" if adam else "")
                     + f" {e['top_share']['mean']:.3f} | {e['norm']['mean']:.3g} | {differ} |")
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, summary: dict) -> None:
    write_atomic(out / "grad.json", lambda f: json.dump(summary, f, indent=1))
    write_atomic(out / "grad.md", lambda f: f.write("# sveb grad: the update direction\n\n" + table(summary)))
