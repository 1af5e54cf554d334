"""The figures of the SVEB report, drawn with matplotlib's object-oriented API on the Agg canvas
(:func:`hista.sveb.present.new_figure`): the MAE bars with their intervals, the histograms of each
estimator's difference from the group mean with its spread (the paper's Figure 2), and ΔMAE vs
GRPO with its paired intervals. Each is written atomically as a PNG."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping, Sequence

from .. import estimators
from ..errors import InputError
from .labels import field_label, label_of
from .methods import Method
from .metrics import is_mcs_row, summary_rows
from .present import finite, new_figure, save_figure
from .rows import CaseRow

__all__ = ["plot_mae", "plot_differences", "plot_delta", "difference_stats"]


def plot_mae(summary: dict, path: str | os.PathLike, labels: dict[str, str] | None = None) -> Path:
    """PNG bar chart of the MAE table: one group of bars per field (then
    "all"), one bar per row (estimators, then the hatched MCS@n rows), error bars from the
    bootstrap interval. Cells without cases are left empty. Returns the path written."""
    import numpy as np

    fields = list(summary["fields"])
    rows = summary["rows"]
    names = summary_rows(summary)
    width = 0.8 / max(1, len(names))
    fig = new_figure(min(18.0, max(6.0, 0.25 * len(fields) * max(1, len(names)) + 3.5)), 4.2)
    ax = fig.add_subplot(1, 1, 1)
    n_mcs = 0
    x = np.arange(len(fields), dtype=float)
    for k, r in enumerate(names):
        maes, err_lo, err_hi = _mae_bars(rows[r], fields)
        style = {"edgecolor": "none"}  # estimators: the default colour cycle
        if is_mcs_row(summary, r):
            style = _mcs_style(n_mcs)
            n_mcs += 1
        ax.bar(
            x - 0.4 + width * (k + 0.5),
            np.nan_to_num(np.asarray(maes, dtype=float), nan=0.0),
            width,
            yerr=np.array([err_lo, err_hi]),
            capsize=2,
            label=label_of(labels, r),
            linewidth=0.6,
            **style,
            error_kw={"elinewidth": 0.8, "ecolor": "0.2"},
        )
    _label_mae_axes(ax, x, fields, labels, legend=bool(names))
    fig.tight_layout()
    return save_figure(fig, Path(path))


def _mae_bars(row: Mapping[str, dict], fields: Sequence[str]) -> tuple[list[float], list[float], list[float]]:
    """A row's MAE per field and its error bars down and up (NaN and none for a cell without an MAE)."""
    import numpy as np

    maes, err_lo, err_hi = [], [], []
    for field in fields:
        cell = row.get(field) or {}
        mae = cell.get("mae")
        if finite(mae):
            lo = cell.get("lo") if finite(cell.get("lo")) else mae
            hi = cell.get("hi") if finite(cell.get("hi")) else mae
            maes.append(mae)
            err_lo.append(max(0.0, mae - lo))
            err_hi.append(max(0.0, hi - mae))
        else:
            maes.append(np.nan)
            err_lo.append(0.0)
            err_hi.append(0.0)
    return maes, err_lo, err_hi


def _mcs_style(n: int) -> dict:
    """The bar style of the ``n``-th MCS row: grey and hatched, apart from the estimators' colours."""
    greys = ["0.88", "0.72", "0.56", "0.40"]
    hatches = ["//", "\\\\", "xx", ".."]
    return {"color": greys[n % len(greys)], "hatch": hatches[n % len(hatches)], "edgecolor": "0.3"}


def _label_mae_axes(ax, x, fields: Sequence[str], labels: Mapping[str, str] | None, *, legend: bool) -> None:
    """The MAE chart's ticks (one per field), axis labels, title, grid and, with rows, its legend."""
    ax.set_xticks(x)
    ax.set_xticklabels([field_label(labels, f) for f in fields])
    ax.set_ylabel("MAE vs. MCS reference (lower is better)")
    ax.set_title("SVEB: state-value error by field")
    ax.set_ylim(bottom=0.0)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if legend:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def _panel_rank(method: Method) -> int:
    """Where a method's panel goes in the paper's Figure 2 order, read from what it reads (its
    estimator's declarations, not its name): a trained critic (PPO-1, then PPO-N), the text
    alone (Numca), hidden states alone without learning across groups (Hista), then the rest."""
    if method.critic is not None:
        return 0 if method.critic["mode"] == "ppo-1" else 1
    try:
        cls = estimators.estimator_class(method.name)
    except InputError:  # an estimator of a plugin this process does not have
        return 4
    need = estimators.needs(cls)
    if need.text and not need.hidden:
        return 2
    if need.hidden and not need.text and not need.across_groups:
        return 3
    return 4


def _figure2_order(methods: Mapping[str, Method]) -> list[str]:
    """The specs of ``methods`` with, when one reads a trained critic, PPO-1, PPO-N, Numca and
    Hista (any profile or parameters) first, as in the paper's Figure 2; otherwise as given."""
    if not any(method.critic is not None for method in methods.values()):
        return list(methods)
    return sorted(methods, key=lambda m: _panel_rank(methods[m]))  # stable: the given order within a rank


def _differences(records: Sequence[CaseRow], method: str) -> list[float]:
    """V − V_GRPO of ``method`` on every case that has both a finite value and group mean."""
    differences = (rec.value(method) - rec.grpo for rec in records)
    return [d for d in differences if math.isfinite(d)]


def difference_stats(records: Sequence[CaseRow], methods: Mapping[str, Method]) -> dict[str, dict[str, float]]:
    """How far each estimator's value V moves from the GRPO baseline V_GRPO, the case's group
    mean (the paper's Figure 2): method -> ``{"n", "mean", "std", "mean_abs"}`` of
    V − V_GRPO over the cases with both (``std`` the population standard deviation,
    ``mean_abs`` the mean of |V − V_GRPO|; NaN without cases), in the panel order of
    :func:`plot_differences`. ``methods``: spec -> :class:`hista.sveb.methods.Method`."""
    import numpy as np

    out = {}
    for m in _figure2_order(methods):
        d = np.asarray(_differences(records, m), dtype=float)
        stats = (float(d.mean()), float(d.std()), float(np.abs(d).mean())) if d.size else (math.nan,) * 3
        out[m] = {"n": int(d.size), **dict(zip(("mean", "std", "mean_abs"), stats))}
    return out


def plot_differences(
    records: Sequence[CaseRow],
    methods: Mapping[str, Method],
    path: str | os.PathLike,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """PNG with one histogram panel per estimator of V − V_GRPO, its value minus the case's
    group mean (the paper's Figure 2: how far an estimator moves away from the GRPO baseline),
    each panel listing n, the mean, the standard deviation and the mean |V − V_GRPO| of
    :func:`difference_stats`. When a method reads a trained critic, the panels start with
    PPO-1, PPO-N, Numca and Hista, as in the paper. All panels share one x range and binning;
    a vertical line marks 0. Cases with a missing value or group mean are left out of that
    panel. Returns the path written."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    stats = difference_stats(records, methods)
    methods = list(stats)
    diffs = {m: np.asarray(_differences(records, m), dtype=float) for m in methods}
    extent = max((float(np.abs(d).max()) for d in diffs.values() if d.size), default=0.0)
    extent = max(extent * 1.05, 0.05)
    bins = np.linspace(-extent, extent, 42)  # 41 bins: 0 is the centre of the middle one

    n = max(1, len(methods))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig = new_figure(3.6 * ncols, 2.8 * nrows + 0.4)
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(n)]
    for ax, m in zip(axes, methods):
        st = stats[m]
        if st["n"]:
            counts, _, _ = ax.hist(diffs[m], bins=bins, color="C0", alpha=0.85)
            ax.set_ylim(0.0, 1.6 * max(1.0, float(counts.max())))  # headroom for the numbers
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.text(0.02, 0.96, f"n={st['n']}\nmean={st['mean']:+.3f}\nstd={st['std']:.3f}\n"
                    f"mean |Δ|={st['mean_abs']:.3f}", transform=ax.transAxes, va="top", ha="left",
                    fontsize="x-small", bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
        else:
            ax.text(0.5, 0.5, "no values", transform=ax.transAxes, ha="center", va="center")
        ax.axvline(0.0, color="C3", linewidth=1.0)
        ax.set_xlim(-extent, extent)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, symmetric=True))
        ax.set_title(label_of(labels, m), fontsize="medium")
        ax.set_xlabel("V − V_GRPO (value − group mean)", fontsize="small")
        ax.set_ylabel("cases", fontsize="small")
    if not methods:
        axes[0].text(0.5, 0.5, "no estimators", transform=axes[0].transAxes, ha="center")
    fig.suptitle("Difference from the group-mean (GRPO) baseline, V − V_GRPO (Δ)")
    fig.tight_layout()
    return save_figure(fig, Path(path))


def plot_delta(paired: dict, path: str | os.PathLike, labels: dict[str, str] | None = None) -> Path:
    """PNG of the paired comparison with GRPO over all cases: one point per method at its
    ΔMAE = MAE(method) − MAE(GRPO), with its paired bootstrap interval as error
    bar, and a vertical line at 0 (left of it: better than GRPO). A method without cases is
    listed with "no values". Returns the path written."""
    methods = list(paired["methods"])
    fig = new_figure(6.4, 1.2 + 0.45 * max(1, len(methods)))
    ax = fig.add_subplot(1, 1, 1)
    ax.axvline(0.0, color="C3", linewidth=1.0)
    for k, m in enumerate(methods):
        y = len(methods) - 1 - k  # first method on top
        cell = paired["rows"][m]["all"]["all"]
        delta = cell.get("delta")
        if not finite(delta):
            ax.text(0.0, y, " no values", va="center", ha="left", fontsize="small")
            continue
        lo, hi = cell.get("lo"), cell.get("hi")
        err = [[max(0.0, delta - lo)], [max(0.0, hi - delta)]] if finite(lo) and finite(hi) else None
        colour = "C0" if cell.get("excludes_zero") else "0.45"
        ax.errorbar([delta], [y], xerr=err, fmt="o", color=colour, ecolor=colour, capsize=3, elinewidth=1.0)
    ax.set_yticks(range(len(methods)))
    ax.set_yticklabels([label_of(labels, m) for m in reversed(methods)])
    ax.set_ylim(-0.6, max(1, len(methods)) - 0.4)
    level = paired.get("level", 0.95)
    ax.set_xlabel(f"ΔMAE vs GRPO, {level:.0%} paired bootstrap interval (lower is better)")
    ax.set_title("SVEB: ΔMAE vs the group-mean (GRPO) baseline, all cases", fontsize="medium")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return save_figure(fig, Path(path))
