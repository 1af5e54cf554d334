"""SVEB report (SPEC §8 ``report``): a markdown table laid out like the paper's Table 4, the
PPO critics in the layout of the paper's Table 1 (λ columns; SPEC §4.5) when the results hold
``ppo-1`` / ``ppo-n`` methods, the paired comparison with GRPO (ΔMAE with intervals and win
rates, by field, position and length), a JSON file, and three plots (MAE bars with intervals;
histograms of each estimator's difference from the group mean with its spread, as the paper's
Figure 2; ΔMAE vs GRPO with intervals).

Input is the dict returned by :func:`hista.sveb.metrics.summarise` and the per-case records it
was computed from (for the difference plot and the paired comparison,
:func:`hista.sveb.paired.paired_summary`). Every file is written atomically (temporary
file beside the target, then ``os.replace``), so a reader never sees a half-written report.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..jsonio import check_not_inputs, check_output_dir, write_atomic, write_json_atomic
from . import results as results_file
from .methods import Method, from_results
from .paired import paired_summary
from .present import finite, fmt, new_figure, save_figure, signed
from .present import resampled as over
from .ranks import MIN_WITHIN, rank_summary

__all__ = ["report_file", "report_labels", "markdown_table", "table1", "table1_markdown", "paired_table",
           "slices_table", "paired_markdown", "difference_stats", "plot_mae", "plot_differences", "plot_delta",
           "write_report"]


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _row_names(summary: Mapping[str, Any]) -> list[str]:
    rows = summary["rows"]
    mcs_rows = summary.get("mcs_rows") or [r for r in rows if r.startswith("MCS@")]
    methods = summary.get("methods") or [r for r in rows if r not in mcs_rows]
    return [r for r in methods if r in rows] + [r for r in mcs_rows if r in rows]


def _is_mcs(summary: Mapping[str, Any], row: str) -> bool:
    mcs_rows = summary.get("mcs_rows")
    return row in mcs_rows if mcs_rows is not None else row.startswith("MCS@")


def _label(labels: Mapping[str, str] | None, key: str) -> str:
    return (labels or {}).get(key, key)


def _field_label(labels: Mapping[str, str] | None, field: str) -> str:
    if labels and field in labels:
        return labels[field]
    return field[:1].upper() + field[1:]





def _cell_text(cell: Mapping[str, Any] | None) -> str:
    if not cell or not finite(cell.get("mae")):
        return "–"
    return f"{fmt(cell['mae'])} [{fmt(cell.get('lo'))}, {fmt(cell.get('hi'))}]"




# --------------------------------------------------------------------------------------------
# what a method is: read from its record (hista.sveb.methods), never from its label
# --------------------------------------------------------------------------------------------


def _lam_text(lam: float) -> str:
    return str(float(lam))  # 0.95 -> "0.95", 1 -> "1.0", as the paper writes λ


def report_labels(methods: Mapping[str, Method]) -> dict[str, str]:
    """The labels the report prints (SPEC §4.5, §8), method spec -> label: each method's own
    label, except that a PPO critic method whose label nobody chose (``label=`` in its spec or
    another label in the results file) is named as in the paper: ``PPO-N``, or ``PPO-N
    (λ=0.95)`` when methods of that mode with several λ are reported. Names two methods would
    share are left as they were."""
    out = {m: method.label for m, method in methods.items()}
    critics = {m: method for m, method in methods.items() if method.critic is not None}
    lams: dict[str, set[float]] = {}
    for method in critics.values():
        lams.setdefault(method.critic["mode"], set()).add(method.critic["lam"])
    renamed = {}
    for m, method in critics.items():
        if method.labelled:
            continue
        several = len(lams[method.critic["mode"]]) > 1
        renamed[m] = method.estimator_label + (f" (λ={_lam_text(method.critic['lam'])})" if several else "")
    taken = [out[m] for m in methods if m not in renamed] + list(renamed.values())
    out.update({m: name for m, name in renamed.items() if taken.count(name) == 1})
    return out


# --------------------------------------------------------------------------------------------
# table
# --------------------------------------------------------------------------------------------


def markdown_table(summary: dict, labels: dict[str, str] | None = None) -> str:
    """The SVEB MAE table in the layout of the paper's Table 4 (SPEC §8 ``report``).

    Rows: the estimators in ``summary["methods"]`` order, then the MCS@n noise rows; columns:
    the fields, then "all". Each cell is ``MAE [lo, hi]`` (95% bootstrap interval); the lowest
    estimator MAE of each column is in bold (ties at the printed precision all bold; MCS rows
    never compete). ``labels`` maps row keys (and optionally field names) to display names.
    The first line is a caption with the number of cases per field.
    """
    fields = list(summary["fields"])
    rows = summary["rows"]
    names = _row_names(summary)
    counts = summary.get("counts", {})

    best: dict[str, str] = {}
    for field in fields:
        shown = [
            fmt(rows[r][field]["mae"])
            for r in names
            if not _is_mcs(summary, r) and field in rows[r] and finite(rows[r][field].get("mae"))
        ]
        if shown:
            best[field] = min(shown, key=float)

    level = summary.get("level", 0.95)
    count_text = ", ".join(
        f"{_field_label(labels, f)} {counts[f]}" for f in fields if f in counts
    )
    caption = (
        f"Table: SVEB mean absolute error against the Monte-Carlo reference value (lower is "
        f"better), {level:.0%} bootstrap interval {over(summary)} in brackets; best estimator per "
        f"column in bold. Cases: {count_text}."
    )
    header = "| Estimator | " + " | ".join(f"{_field_label(labels, f)} ↓" for f in fields) + " |"
    rule = "| --- | " + " | ".join("---" for _ in fields) + " |"
    lines = [caption, "", header, rule]
    for r in names:
        cells = []
        for field in fields:
            cell = rows[r].get(field)
            text = _cell_text(cell)
            if (
                not _is_mcs(summary, r)
                and cell is not None
                and finite(cell.get("mae"))
                and fmt(cell["mae"]) == best.get(field)
            ):
                text = f"**{text}**"
            cells.append(text)
        lines.append(f"| {_label(labels, r)} | " + " | ".join(cells) + " |")
    # a method that gave no finite value on some cases: say so rather than drop them silently
    missing = [(r, _skipped(rows[r])) for r in names if not _is_mcs(summary, r)]
    total = counts.get("all", "?")
    missing = [f"{_label(labels, r)} ({n} of {total} cases)" for r, n in missing if n]
    if missing:
        lines += ["", "Cases left out of a row because the method gave no finite value: " + ", ".join(missing) + "."]
    return "\n".join(lines) + "\n"


def _skipped(row: Mapping[str, Any]) -> int:
    """Cases a method row left out (no finite value): its ``all`` cell's count, else the sum."""
    if "all" in row:
        return int(row["all"].get("skipped") or 0)
    return sum(int(cell.get("skipped") or 0) for cell in row.values())


def _pearson_table(summary: Mapping[str, Any], labels: Mapping[str, str] | None) -> str:
    fields = list(summary["fields"])
    rows = summary["rows"]
    names = [r for r in _row_names(summary) if not _is_mcs(summary, r)]
    header = "| Estimator | " + " | ".join(_field_label(labels, f) for f in fields) + " |"
    rule = "| --- | " + " | ".join("---" for _ in fields) + " |"
    lines = [header, rule]
    for r in names:
        vals = [fmt(rows[r].get(f, {}).get("pearson")) for f in fields]
        lines.append(f"| {_label(labels, r)} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# PPO critics: the paper's Table 1
# --------------------------------------------------------------------------------------------

NO_LAMBDA = "no λ"


def table1(summary: dict, methods: Mapping[str, Method], labels: Mapping[str, str] | None = None) -> dict | None:
    """The PPO critics in the layout of the paper's Table 1 (SPEC §4.5, §8), or None when no
    method of ``summary`` reads a trained critic (``ppo-1``, ``ppo-n``).

    Returns ``{"columns": ["λ = 0.95", "λ = 1.0", "no λ"], "rows": [{"label", "cells": {column:
    {"method", "mae", "lo", "hi", "n"}}}]}``: one column per distinct λ of the critic methods
    (a spec without ``lam`` has the default 1.0), sorted, then "no λ"; rows GRPO (each group
    mean method, in "no λ"; without one, the summary's ``grpo_mae`` with no interval and
    ``method`` None), then one row per critic mode (``PPO-1``, ``PPO-N``) with each method in
    its λ column. A cell is the method's overall MAE (the "all" field) with its bootstrap
    interval; a second method of the same mode and λ opens another row."""
    rows = summary["rows"]
    found = {r: methods[r] for r in _row_names(summary) if not _is_mcs(summary, r) and r in methods}
    critics = {m: method.critic for m, method in found.items() if method.critic is not None}
    if not critics:
        return None
    columns = [f"λ = {_lam_text(lam)}" for lam in sorted({need["lam"] for need in critics.values()})] + [NO_LAMBDA]

    def cell(m: str) -> dict:
        whole = rows[m].get("all") or {}
        return {"method": m, **{k: whole.get(k, math.nan) for k in ("mae", "lo", "hi", "n")}}

    out = [{"label": _label(labels, m), "cells": {NO_LAMBDA: cell(m)}}
           for m, method in found.items() if method.baseline]
    grpo_mae = (summary.get("grpo_mae") or {}).get("all")
    if not out and finite(grpo_mae):
        n = (summary.get("counts") or {}).get("all", math.nan)
        out.append({"label": "GRPO", "cells": {NO_LAMBDA: {"method": None, "mae": grpo_mae, "lo": math.nan,
                                                           "hi": math.nan, "n": n}}})
    first_critic_row = len(out)
    for m in sorted(critics, key=lambda m: found[m].estimator_label):  # PPO-1, then PPO-N
        name, column = found[m].estimator_label, f"λ = {_lam_text(critics[m]['lam'])}"
        row = next((r for r in out[first_critic_row:] if r["label"] == name and column not in r["cells"]), None)
        if row is None:
            row = {"label": name, "cells": {}}
            out.append(row)
        row["cells"][column] = cell(m)
    return {"columns": columns, "rows": out}


def table1_markdown(table: dict | None, level: float = 0.95, resampled: str = "cases") -> str:
    """The markdown of :func:`table1` (SPEC §4.5, §8): a caption (saying the intervals resampled
    ``resampled``, "cases" or "problems", as the summary's ``resampled``), then one line per row,
    each cell ``MAE [lo, hi]`` as in the main table (the MAE alone without an interval), "–" where
    the row has no method of that λ. Empty text for ``None`` (no critic methods)."""
    if table is None:
        return ""
    caption = (
        f"Table: MAE over all cases (the main table's \"All\" column) of GRPO and the PPO critics, by "
        f"the GAE λ each critic was trained with (GRPO has none), as in the paper's Table 1; {level:.0%} "
        f"bootstrap interval {over({'resampled': resampled})} in brackets. PPO-1: a critic that never "
        f"saw the state's problem; PPO-N: a critic trained on the initial rollouts of the same problems."
    )
    columns = table["columns"]
    lines = [caption, "", "| Method | " + " | ".join(columns) + " |", "| --- | " + " | ".join("---" for _ in columns)
             + " |"]
    for row in table["rows"]:
        cells = []
        for column in columns:
            cell = row["cells"].get(column)
            bare = cell is not None and cell["method"] is None  # the recorded group mean: no interval
            cells.append(fmt(cell["mae"]) if bare else _cell_text(cell))
        lines.append(f"| {row['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# paired comparison with GRPO
# --------------------------------------------------------------------------------------------



def _paired_cell_text(cell: Mapping[str, Any] | None) -> str:
    """``ΔMAE [lo, hi]`` (``*`` when the interval excludes 0), the win rate and, when there are
    ties, the tie rate; "–" without cases."""
    if not cell or not cell.get("n") or not finite(cell.get("delta")):
        return "–"
    star = "*" if cell.get("excludes_zero") else ""
    win = f"win {cell['win']:.0%}" if finite(cell.get("win")) else "win n/a"
    if finite(cell.get("tie")) and cell["tie"] > 0:
        win += f", tie {cell['tie']:.0%}"
    return f"{signed(cell['delta'])} [{signed(cell.get('lo'))}, {signed(cell.get('hi'))}]{star} · {win}"


def _paired_rows(paired: Mapping[str, Any], columns: Sequence[tuple[str, str]], labels: Mapping[str, str] | None,
                 column_label: Any) -> list[str]:
    """Header, rule and one line per method of a paired table over ``(group, slice)`` columns."""
    header = "| Estimator | " + " | ".join(column_label(group, name) for group, name in columns) + " |"
    lines = [header, "| --- | " + " | ".join("---" for _ in columns) + " |"]
    for m in paired["methods"]:
        row = paired["rows"][m]
        cells = [_paired_cell_text(row.get(group, {}).get(name)) for group, name in columns]
        lines.append(f"| {_label(labels, m)} | " + " | ".join(cells) + " |")
    return lines


def paired_table(paired: dict, labels: dict[str, str] | None = None) -> str:
    """Markdown table of the paired comparison with GRPO by field (SPEC §8): one row per method,
    columns the fields then "all", each cell ``ΔMAE [lo, hi]`` (MAE of the method minus MAE of
    the group mean on the same cases, with its paired bootstrap interval; ``*`` where the
    interval excludes 0) and the win rate against GRPO (and the tie rate, when not 0). ``paired`` is the dict of
    :func:`hista.sveb.paired.paired_summary`; the first line is a caption."""
    level = paired.get("level", 0.95)
    columns = [("field", f) for f in paired["slices"]["field"]] + [("all", "all")]
    counts = paired["counts"]
    count_text = ", ".join(f"{_field_label(labels, name)} {counts[group][name]}" for group, name in columns)
    caption = (
        f"Table: paired comparison with GRPO (the group mean): ΔMAE = MAE(estimator) − MAE(GRPO) on "
        f"the same cases (negative: closer to the target than GRPO), {level:.0%} paired bootstrap "
        f"interval {over(paired)} in brackets (each resample draws the same cases for both), * where "
        f"it excludes 0; win = share of cases where the estimator is strictly closer to the target "
        f"(tie: as close). "
        f"Cases: {count_text}."
    )
    lines = [caption, ""] + _paired_rows(paired, columns, labels, lambda group, name: _field_label(labels, name))
    return "\n".join(lines) + "\n"


def slices_table(paired: dict, labels: dict[str, str] | None = None) -> str:
    """Markdown table of the paired comparison with GRPO by relative position t/T (thirds) and by
    response length (terciles), all fields pooled (SPEC §8); cells as in :func:`paired_table`.
    Without any case that records its response length, one sentence saying so."""
    columns = [(group, name) for group in ("position", "length") for name in paired["slices"][group]]
    if not columns:
        return "No case records its response length: no breakdown by position or length.\n"
    counts = paired["counts"]
    count_text = ", ".join(f"{name} {counts[group][name]}" for group, name in columns)
    caption = (
        f"Table: ΔMAE vs GRPO by relative position of the state (t/T, thirds) and by response length "
        f"(terciles of T in tokens), all fields pooled; cells as above. Cases: {count_text}."
    )
    if paired.get("no_length"):
        caption += f" {paired['no_length']} cases without a recorded length are left out."
    lines = [caption, ""] + _paired_rows(paired, columns, labels, lambda group, name: name)
    return "\n".join(lines) + "\n"


def paired_markdown(paired: dict, labels: Mapping[str, str] | None = None) -> str:
    """Both paired tables (:func:`paired_table`, then :func:`slices_table`) of a paired summary
    (:func:`hista.sveb.paired.paired_summary`, a results file's ``paired``; SPEC §8), as ``sveb
    eval`` prints them."""
    return paired_table(paired, labels) + "\n" + slices_table(paired, labels)


# --------------------------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------------------------


def plot_mae(summary: dict, path: str | os.PathLike, labels: dict[str, str] | None = None) -> Path:
    """PNG bar chart of the MAE table (SPEC §8 ``report``): one group of bars per field (then
    "all"), one bar per row (estimators, then the hatched MCS@n rows), error bars from the
    bootstrap interval. Cells without cases are left empty. Returns the path written."""
    import numpy as np

    fields = list(summary["fields"])
    rows = summary["rows"]
    names = _row_names(summary)
    width = 0.8 / max(1, len(names))
    fig = new_figure(min(18.0, max(6.0, 0.25 * len(fields) * max(1, len(names)) + 3.5)), 4.2)
    ax = fig.add_subplot(1, 1, 1)
    greys = ["0.88", "0.72", "0.56", "0.40"]
    hatches = ["//", "\\\\", "xx", ".."]
    n_mcs = 0
    x = np.arange(len(fields), dtype=float)
    for k, r in enumerate(names):
        maes, err_lo, err_hi = [], [], []
        for field in fields:
            cell = rows[r].get(field) or {}
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
        mcs = _is_mcs(summary, r)
        style = {"edgecolor": "none"}  # estimators: the default colour cycle
        if mcs:
            style = {"color": greys[n_mcs % len(greys)], "hatch": hatches[n_mcs % len(hatches)],
                     "edgecolor": "0.3"}
            n_mcs += 1
        ax.bar(
            x - 0.4 + width * (k + 0.5),
            np.nan_to_num(np.asarray(maes, dtype=float), nan=0.0),
            width,
            yerr=np.array([err_lo, err_hi]),
            capsize=2,
            label=_label(labels, r),
            linewidth=0.6,
            **style,
            error_kw={"elinewidth": 0.8, "ecolor": "0.2"},
        )
    ax.set_xticks(x)
    ax.set_xticklabels([_field_label(labels, f) for f in fields])
    ax.set_ylabel("MAE vs. MCS reference (lower is better)")
    ax.set_title("SVEB: state-value error by field")
    ax.set_ylim(bottom=0.0)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if names:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return save_figure(fig, Path(path))


#: estimators the paper's Figure 2 shows, in its order (registered names); other panels follow
FIGURE2_ORDER = ("ppo-1", "ppo-n", "numca", "hista")


def _figure2_order(methods: Mapping[str, Method]) -> list[str]:
    """The specs of ``methods`` with, when one reads a trained critic, PPO-1, PPO-N, Numca and
    Hista (any profile or parameters) first, as in the paper's Figure 2; otherwise as given."""
    if not any(method.critic is not None for method in methods.values()):
        return list(methods)

    def rank(m: str) -> int:
        name = methods[m].name
        return FIGURE2_ORDER.index(name) if name in FIGURE2_ORDER else len(FIGURE2_ORDER)

    return sorted(methods, key=rank)  # stable: the given order within a rank and after them


def _differences(records: Sequence[dict], method: str) -> list[float]:
    """V − V_GRPO of ``method`` on every case that has both a finite value and group mean."""
    d = []
    for rec in records:
        v = (rec.get("values") or {}).get(method)
        g = rec.get("group_mean")
        if finite(v) and finite(g):
            d.append(float(v) - float(g))
    return d


def difference_stats(records: Sequence[dict], methods: Mapping[str, Method]) -> dict[str, dict[str, float]]:
    """How far each estimator's value V moves from the GRPO baseline V_GRPO, the case's group
    mean (the paper's Figure 2; SPEC §8): method -> ``{"n", "mean", "std", "mean_abs"}`` of
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
    records: Sequence[dict],
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
        ax.set_title(_label(labels, m), fontsize="medium")
        ax.set_xlabel("V − V_GRPO (value − group mean)", fontsize="small")
        ax.set_ylabel("cases", fontsize="small")
    if not methods:
        axes[0].text(0.5, 0.5, "no estimators", transform=axes[0].transAxes, ha="center")
    fig.suptitle("Difference from the group-mean (GRPO) baseline, V − V_GRPO (Δ)")
    fig.tight_layout()
    return save_figure(fig, Path(path))


def plot_delta(paired: dict, path: str | os.PathLike, labels: dict[str, str] | None = None) -> Path:
    """PNG of the paired comparison with GRPO over all cases (SPEC §8 ``report``): one point per
    method at its ΔMAE = MAE(method) − MAE(GRPO), with its paired bootstrap interval as error
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
    ax.set_yticklabels([_label(labels, m) for m in reversed(methods)])
    ax.set_ylim(-0.6, max(1, len(methods)) - 0.4)
    level = paired.get("level", 0.95)
    ax.set_xlabel(f"ΔMAE vs GRPO, {level:.0%} paired bootstrap interval (lower is better)")
    ax.set_title("SVEB: ΔMAE vs the group-mean (GRPO) baseline, all cases", fontsize="medium")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return save_figure(fig, Path(path))


# --------------------------------------------------------------------------------------------
# everything
# --------------------------------------------------------------------------------------------


_HOW_TO_READ = (
    "Each case is a state sampled from a real rollout; its reference value (the target) is "
    "the mean reward of the M Monte-Carlo continuations sampled from that state. Estimator "
    "rows give the mean absolute error (MAE) of each estimator's state value against that "
    "target, with a {level} percentile bootstrap interval {over} in brackets; the best "
    "estimator of each column is in bold. The MCS@n rows are not estimators: they give the "
    "exact expected error of averaging only n of the M continuations, i.e. what n extra "
    "rollouts from the state itself would achieve (a noise yardstick, as in the paper's "
    "Table 4). The Pearson correlation of each estimator with the target is listed below, "
    "and all numbers are in `report.json`."
)


def _differences_table(stats: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str] | None) -> str:
    """Markdown of :func:`difference_stats`: one line per estimator, as the histogram panels."""
    lines = ["Table: each estimator's value V minus the GRPO baseline V_GRPO (the case's group mean), "
             "over the cases with both, as in the histograms (the paper's Figure 2); std is the population "
             "standard deviation.", "",
             "| Estimator | n | mean V − V_GRPO | std | mean abs(V − V_GRPO) |", "| --- | --- | --- | --- | --- |"]
    for m, st in stats.items():
        lines.append(f"| {_label(labels, m)} | {st['n']} | {signed(st['mean'])} | {fmt(st['std'])} | "
                     f"{fmt(st['mean_abs'])} |")
    return "\n".join(lines) + "\n"


#: the files ``write_report`` writes into its folder, by key (SPEC §8)
REPORT_FILES = {"markdown": "report.md", "json": "report.json", "mae_plot": "mae.png",
                "differences_plot": "differences.png", "delta_plot": "delta.png"}


def _interval_text(cell: Mapping[str, Any] | None, sign: bool = False) -> str:
    """``value [lo, hi]`` of a rank-metric cell (``sign``: a difference, starred when its
    interval excludes 0), or ``n/a``."""
    if not cell or not finite(cell.get("value")):
        return "n/a"
    show = signed if sign else fmt
    if not (finite(cell.get("lo")) and finite(cell.get("hi"))):
        return show(cell["value"])
    star = "*" if sign and (cell["lo"] > 0 or cell["hi"] < 0) else ""
    return f"{show(cell['value'])} [{show(cell['lo'])}, {show(cell['hi'])}]{star}"


def ranks_table(rank_metrics: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> str:
    """The rank metrics of :func:`hista.sveb.ranks.rank_summary` as markdown (docs/sveb.md "Rank
    metrics"): per row Spearman ρ with the Monte-Carlo value, its paired difference from GRPO,
    the mean within-problem ρ, the AUROC of a continuation's success and its difference."""
    level = rank_metrics.get("level", 0.95)
    lines = [f"Spearman ρ between each estimate and the Monte-Carlo value of the state, over all cases and within "
             f"problem (the mean of each problem's ρ, for problems with {MIN_WITHIN} or more cases), and the AUROC of "
             "telling a successful continuation (reward 1) from a failed one (reward 0) by the state's value; "
             f"{level:.0%} percentile bootstrap intervals {over(rank_metrics)}, differences from GRPO paired on the "
             "same resamples (* the interval excludes 0). MCS@k: the mean of a case's first k continuations, judged "
             "on its other continuations.", "",
             "| method | cases | ρ | Δρ vs GRPO | ρ within problem | AUROC | ΔAUROC vs GRPO |",
             "|---|---|---|---|---|---|---|"]
    for name in rank_metrics.get("order", []):
        cell = rank_metrics["rows"][name]
        delta = cell.get("delta") or {}
        lines.append(f"| {_label(labels, name)} | {cell['n']} | {_interval_text(cell['rho'])} | "
                     f"{_interval_text(delta.get('rho'), True)} | {_interval_text(cell['rho_within'])} | "
                     f"{_interval_text(cell['auroc'])} | {_interval_text(delta.get('auroc'), True)} |")
    return "\n".join(lines) + "\n"


def write_report(
    summary: dict,
    records: Sequence[dict],
    methods: Mapping[str, Method],
    out_dir: str | os.PathLike,
    *,
    paired: dict | None = None,
) -> dict[str, Path]:
    """Write the SVEB report into ``out_dir`` (SPEC §4.5, §8 ``report``): ``report.md`` (title,
    the Table-4 style MAE table, how to read it, the PPO critics in the paper's Table 1 layout
    when a method reads a critic (:func:`table1`), the paired comparison with GRPO by field and
    by position and length, Pearson table, each estimator's difference from GRPO
    (:func:`difference_stats`), links to the plots), ``report.json`` (``{"summary": ...,
    "paired": ..., "labels": ..., "table1": ... or null, "differences": ...}``, the labels as the
    report prints them (:func:`report_labels` of ``methods``, spec ->
    :class:`hista.sveb.methods.Method`), NaN written as null), ``mae.png``,
    ``differences.png`` and ``delta.png``. ``paired`` defaults to
    :func:`hista.sveb.paired.paired_summary` of ``records`` and ``methods`` with the summary's
    ``n_boot`` and ``seed``. Each file is written atomically. Returns
    ``{"markdown", "json", "mae_plot", "differences_plot", "delta_plot"}`` -> path."""
    out = Path(out_dir)
    paths = {key: out / name for key, name in REPORT_FILES.items()}
    # SPEC §11: a bad folder or a non-regular file in the way fails here, before any plotting
    check_output_dir(out, [p.name for p in paths.values()])
    out.mkdir(parents=True, exist_ok=True)
    labels = report_labels(methods)
    plot_mae(summary, paths["mae_plot"], labels=labels)
    plot_differences(records, methods, paths["differences_plot"], labels=labels)
    if paired is None:
        paired = paired_summary(records, list(methods), n_boot=summary.get("n_boot", 2000), seed=summary.get("seed", 0))
    plot_delta(paired, paths["delta_plot"], labels=labels)

    ppo = table1(summary, methods, labels)
    differences = difference_stats(records, methods)
    rank_metrics = rank_summary(records, list(methods), n_boot=summary.get("n_boot", 2000),
                                seed=summary.get("seed", 0))
    write_json_atomic(paths["json"], {"summary": summary, "paired": paired, "labels": labels, "table1": ppo,
                                      "differences": differences, "ranks": rank_metrics}, indent=2)

    level = summary.get("level", 0.95)
    table1_md = table1_markdown(ppo, level, summary.get("resampled", "cases"))
    ppo_section = ["## PPO critics (paper Table 1 layout)", "", table1_md] if ppo else []
    md = "\n".join([
        "# SVEB report",
        "",
        markdown_table(summary, labels),
        _HOW_TO_READ.format(level=f"{level:.0%}", over=over(summary)),
        "",
        *ppo_section,
        "## Paired comparison with GRPO",
        "",
        paired_table(paired, labels),
        slices_table(paired, labels),
        "## Pearson correlation with the target",
        "",
        _pearson_table(summary, labels),
        "## Rank metrics",
        "",
        ranks_table(rank_metrics, labels),
        "## Difference from GRPO (paper Figure 2)",
        "",
        _differences_table(differences, labels),
        "## Plots",
        "",
        f"![MAE by field with {level:.0%} intervals]({paths['mae_plot'].name})",
        "",
        f"![Difference of each estimator from the group mean]({paths['differences_plot'].name})",
        "",
        f"![ΔMAE of each estimator vs GRPO with {level:.0%} paired intervals]({paths['delta_plot'].name})",
        "",
    ])
    write_atomic(paths["markdown"], lambda fh: fh.write(md), kind="markdown")
    return paths


def report_file(path: str | os.PathLike, out: str | os.PathLike) -> tuple[dict[str, Path], str]:
    """``sveb report`` (SPEC §8): read and check the results file ``path``
    (:func:`hista.sveb.results.read`), recompute its summary from the case rows
    (:func:`hista.sveb.results.summarise`) and write ``report.md``, ``report.json`` and the plots
    into the folder ``out`` (:func:`write_report`), each method as the file records it
    (:func:`hista.sveb.methods.from_results`). Returns the paths written and the markdown MAE
    table (Table 4 layout) to print. Nothing is written when the file is invalid."""
    check_not_inputs([Path(out) / name for name in REPORT_FILES.values()], [path])
    results = results_file.read(path)
    summary = results_file.summarise(results, path=path)
    methods = from_results(results)
    paths = write_report(summary, results["cases"], methods, Path(out))
    return paths, markdown_table(summary, report_labels(methods))
