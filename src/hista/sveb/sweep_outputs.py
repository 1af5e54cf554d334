"""What ``sveb sweep`` writes and prints: ``sweep.json``, ``sweep.md`` (the points by
ΔMAE vs GRPO, the selection, the heatmaps), a ``heatmap_<p1>_<p2>.png`` per pair of grid keys,
and the summary the command prints."""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from ..jsonio import write_atomic, write_json_atomic
from .methods import scalar_text
from .present import finite, fmt, new_figure, percent, resampled, save_figure, signed

__all__ = ["write_outputs", "output_names", "markdown", "summary_text", "selection_text", "ranked", "plot_heatmap",
           "heatmap_pairs", "heatmap_name", "SWEEP_JSON", "SWEEP_MD"]

SWEEP_JSON, SWEEP_MD = "sweep.json", "sweep.md"


def heatmap_pairs(grid: Optional[dict]) -> list[tuple[str, str]]:
    """The pairs of grid keys with at least 2 values each, in grid order (one heatmap each)."""
    keys = [k for k, v in (grid or {}).items() if len(v) >= 2]
    return list(itertools.combinations(keys, 2))


def heatmap_name(p1: str, p2: str) -> str:
    """File name of the heatmap of grid keys ``p1`` (rows) and ``p2`` (columns)."""
    return f"heatmap_{p1}_{p2}.png"


def output_names(grid: Optional[dict]) -> list[str]:
    """The names of the files :func:`write_outputs` writes for ``grid``, checked before a sweep starts."""
    return [SWEEP_JSON, SWEEP_MD, *(heatmap_name(a, b) for a, b in heatmap_pairs(grid))]


def _count(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless n is 1."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _reported_text(rep: dict) -> str:
    """The reported numbers of a selection in one line."""
    return (f"MAE {fmt(rep['mae'])} (GRPO {fmt(rep['grpo_mae'])}), ΔMAE {signed(rep['delta_mae'])} "
            f"[{signed(rep['delta_lo'])}, {signed(rep['delta_hi'])}], win rate {percent(rep['win_rate'])}, "
            f"ties {percent(rep['tie_rate'])}, {_count(rep['n'], 'case')}")


def ranked(points: Sequence[dict]) -> list[dict]:
    """The points sorted by ΔMAE, best (most negative) first, points without one last."""
    return sorted(points, key=lambda p: p["delta_mae"] if finite(p["delta_mae"]) else math.inf)


def summary_text(result: dict, top: int = 5) -> str:
    """What ``sveb sweep`` prints: the points, GRPO's MAE, the ``top`` points by ΔMAE with the
    interval (saying whether it resampled problems or cases) and the selection."""
    lines = [f"{len(result['points'])} points on {_count(result['n_cases'], 'case')}; GRPO MAE "
             f"{fmt(result['grpo_mae'])}; best by ΔMAE vs GRPO [95% interval {resampled(result)}]:"]
    for p in ranked(result["points"])[:top]:
        lines.append(f"  {signed(p['delta_mae'])} [{signed(p['delta_lo'])}, {signed(p['delta_hi'])}]  "
                     f"MAE {fmt(p['mae'])}  win {percent(p['win_rate'])}  {p['label']}")
    return "\n".join(lines) + "\n" + selection_text(result["selection"])


def selection_text(selection: dict) -> str:
    """The selection result in a few lines of markdown."""
    if selection["mode"] == "none":
        return f"No selection: {selection['reason']}.\n"
    rep = selection["reported"]
    if selection["mode"] == "split":
        return (f"Chosen on {_count(len(selection['selection_problems']), 'problem')} "
                f"({_count(selection['selection_cases'], 'case')}, "
                f"fraction {selection['fraction']:g}, seed {selection['seed']}): `{selection['label']}` "
                f"(MAE {fmt(selection['selection_mae'])} there).\n\nOn the other "
                f"{_count(len(selection['report_problems']), 'problem')}: {_reported_text(rep)}.\n")
    lines = [f"{selection['k']}-fold by problem (seed {selection['seed']}): each fold's point is chosen on the "
             "other folds and scored on the fold.", "", "| fold | problems | cases | picked | MAE on the others | "
             "MAE on the fold |", "| --- | --- | --- | --- | --- | --- |"]
    for f in selection["folds"]:
        lines.append(f"| {f['fold']} | {len(f['problems'])} | {f['cases']} | `{f['label']}` | "
                     f"{fmt(f['selection_mae'])} | {fmt(f['held_out_mae'])} |")
    lines += ["", f"Held-out cases pooled: {_reported_text(rep)}.", ""]
    return "\n".join(lines)


def markdown(result: dict, heatmaps: Sequence[str] = ()) -> str:
    """``sweep.md``: the points sorted by ΔMAE vs GRPO (best first; the caption says whether the
    intervals resampled problems or cases), the selection and the heatmaps."""
    keys = list(result["grid"] or {})
    head = [f"`{k}`" for k in keys] if keys else ["method"]
    lines = [
        "# SVEB sweep", "",
        f"{len(result['points'])} points on {result['n_cases']} cases of `{result['cases_file']}`"
        + (f", grid over `{result['base']}`" if keys else "") + f"; GRPO (group mean) MAE {fmt(result['grpo_mae'])}. "
        "ΔMAE = MAE − GRPO MAE on the same cases (negative: better than GRPO), with a paired bootstrap 95% interval "
        f"({result['n_boot']} resamples, seed {result['seed']}) {resampled(result)}; win = cases strictly closer to "
        "the target than GRPO; ρ = Spearman correlation with the Monte-Carlo value, AUROC of a continuation's "
        "success by the state's value (docs/sveb.md \"Rank metrics\").",
        "",
        "| rank | " + " | ".join(head) + " | MAE | ΔMAE [95% interval] | win | tie | ρ | AUROC | n |",
        "| --- | " + " | ".join("---" for _ in head) + " | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rank, p in enumerate(ranked(result["points"]), start=1):
        cells = [scalar_text(p["params"][k]) for k in keys] if keys else [f"`{p['label']}`"]
        lines.append(f"| {rank} | " + " | ".join(cells) + f" | {fmt(p['mae'])} | {signed(p['delta_mae'])} "
                     f"[{signed(p['delta_lo'])}, {signed(p['delta_hi'])}] | {percent(p['win_rate'])} | "
                     f"{percent(p['tie_rate'])} | {fmt(p.get('rho'))} | {fmt(p.get('auroc'))} | {p['n']} |")
    lines += ["", "## Selection", "", selection_text(result["selection"])]
    if heatmaps:
        lines += ["## Heatmaps", ""] + [f"![{name}]({name})\n" for name in heatmaps]
    return "\n".join(lines)


def plot_heatmap(points: Sequence[dict], grid: dict, p1: str, p2: str, path: Union[str, os.PathLike]) -> Path:
    """PNG heatmap of ΔMAE vs GRPO over the values of grid keys ``p1`` (rows) and ``p2``
    (columns), each cell the mean over the points with those values, i.e. averaged over the
    other keys with several values (the title names them); blue is better than GRPO."""
    rows, cols = grid[p1], grid[p2]
    cells: dict[tuple[int, int], list[float]] = {}
    for p in points:
        i = next(k for k, v in enumerate(rows) if type(v) is type(p["params"][p1]) and v == p["params"][p1])
        j = next(k for k, v in enumerate(cols) if type(v) is type(p["params"][p2]) and v == p["params"][p2])
        if finite(p["delta_mae"]):
            cells.setdefault((i, j), []).append(p["delta_mae"])
    matrix = np.full((len(rows), len(cols)), np.nan)
    for (i, j), ds in cells.items():
        matrix[i, j] = sum(ds) / len(ds)
    extent = float(np.nanmax(np.abs(matrix))) if np.isfinite(matrix).any() else 0.0
    extent = max(extent, 1e-3)  # an all-zero map stays readable
    fig = new_figure(1.2 * len(cols) + 2.6, 0.7 * len(rows) + 1.8)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap="RdBu_r", vmin=-extent, vmax=extent, aspect="auto")
    for (i, j), value in np.ndenumerate(matrix):
        ax.text(j, i, signed(float(value)), ha="center", va="center", fontsize="small")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([scalar_text(v) for v in cols])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([scalar_text(v) for v in rows])
    ax.set_xlabel(p2)
    ax.set_ylabel(p1)
    others = [k for k in grid if k not in (p1, p2) and len(grid[k]) > 1]
    ax.set_title("ΔMAE vs GRPO" + (f"\nmean over {', '.join(others)}" if others else ""), fontsize="medium")
    fig.colorbar(image, ax=ax, label="ΔMAE (negative: better than GRPO)")
    fig.tight_layout()
    return save_figure(fig, Path(path))


def write_outputs(result: dict, out: Union[str, Path]) -> dict[str, Path]:
    """Write ``sweep.json`` (``result``, NaN as null), ``sweep.md`` and a heatmap per pair of
    grid keys with at least 2 values each into ``out``, each atomically, so that an interrupted
    write leaves no half file; returns name -> path."""
    out = Path(out)
    paths = {}
    for p1, p2 in heatmap_pairs(result["grid"]):
        paths[heatmap_name(p1, p2)] = plot_heatmap(result["points"], result["grid"], p1, p2,
                                                   out / heatmap_name(p1, p2))
    paths[SWEEP_JSON] = write_json_atomic(out / SWEEP_JSON, {k: v for k, v in result.items() if k != "paths"})
    text = markdown(result, [name for name in paths if name.startswith("heatmap_")])
    paths[SWEEP_MD] = write_atomic(out / SWEEP_MD, lambda fh: fh.write(text), kind="markdown")
    return paths
