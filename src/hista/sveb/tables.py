"""The markdown tables of the SVEB report: the MAE table in the layout of the paper's Table 4, the
PPO critics in the layout of its Table 1, the paired comparison with GRPO (by field, by position
and length), the Pearson correlations, the rank metrics and each estimator's difference from
GRPO. Each table is text built from a summary (:func:`hista.sveb.metrics.summarise`,
:func:`hista.sveb.paired.paired_summary`, :func:`hista.sveb.ranks.rank_summary`); nothing is
computed here but the layout."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .labels import field_label, label_of, lam_text
from .methods import Method
from .metrics import GRPO_ROW, is_mcs_row, summary_rows
from .present import finite, fmt, signed
from .present import resampled as over
from .ranks import MIN_WITHIN

__all__ = ["markdown_table", "pearson_table", "table1", "table1_markdown", "NO_LAMBDA", "paired_table",
           "slices_table", "paired_markdown", "ranks_table", "differences_table"]


def _cell_text(cell: Mapping[str, Any] | None) -> str:
    """``MAE [lo, hi]`` of a summary cell, or "–" without a finite MAE."""
    if not cell or not finite(cell.get("mae")):
        return "–"
    return f"{fmt(cell['mae'])} [{fmt(cell.get('lo'))}, {fmt(cell.get('hi'))}]"


# --------------------------------------------------------------------------------------------
# the MAE table (the paper's Table 4) and the Pearson table
# --------------------------------------------------------------------------------------------


def markdown_table(summary: dict, labels: dict[str, str] | None = None) -> str:
    """The SVEB MAE table in the layout of the paper's Table 4.

    Rows: the estimators in ``summary["methods"]`` order, then the MCS@n noise rows; columns:
    the fields, then "all". Each cell is ``MAE [lo, hi]`` (95% bootstrap interval); the lowest
    estimator MAE of each column is in bold (ties at the printed precision all bold; MCS rows
    never compete). ``labels`` maps row keys (and optionally field names) to display names.
    The first line is a caption with the number of cases per field.
    """
    fields = list(summary["fields"])
    names = summary_rows(summary)
    best = _best_maes(summary, names, fields)
    header = "| Estimator | " + " | ".join(f"{field_label(labels, f)} ↓" for f in fields) + " |"
    rule = "| --- | " + " | ".join("---" for _ in fields) + " |"
    lines = [_mae_caption(summary, fields, labels), "", header, rule]
    lines += [_mae_row(summary, r, fields, best, labels) for r in names]
    lines += _left_out_note(summary, names, labels)
    return "\n".join(lines) + "\n"


def _best_maes(summary: Mapping[str, Any], names: Sequence[str], fields: Sequence[str]) -> dict[str, str]:
    """The lowest estimator MAE of each field as printed (MCS rows never compete), for the bold cells."""
    rows = summary["rows"]
    best: dict[str, str] = {}
    for field in fields:
        shown = [
            fmt(rows[r][field]["mae"])
            for r in names
            if not is_mcs_row(summary, r) and field in rows[r] and finite(rows[r][field].get("mae"))
        ]
        if shown:
            best[field] = min(shown, key=float)
    return best


def _mae_caption(summary: Mapping[str, Any], fields: Sequence[str], labels: Mapping[str, str] | None) -> str:
    """The MAE table's caption: what the cells hold and the number of cases per field."""
    counts = summary.get("counts", {})
    level = summary.get("level", 0.95)
    count_text = ", ".join(
        f"{field_label(labels, f)} {counts[f]}" for f in fields if f in counts
    )
    return (
        f"Table: SVEB mean absolute error against the Monte-Carlo reference value (lower is "
        f"better), {level:.0%} bootstrap interval {over(summary)} in brackets; best estimator per "
        f"column in bold. Cases: {count_text}."
    )


def _mae_row(summary: Mapping[str, Any], r: str, fields: Sequence[str], best: Mapping[str, str],
             labels: Mapping[str, str] | None) -> str:
    """Row ``r`` of the MAE table, its cells in bold where they are their column's best estimator MAE."""
    cells = []
    for field in fields:
        cell = summary["rows"][r].get(field)
        text = _cell_text(cell)
        if (
            not is_mcs_row(summary, r)
            and cell is not None
            and finite(cell.get("mae"))
            and fmt(cell["mae"]) == best.get(field)
        ):
            text = f"**{text}**"
        cells.append(text)
    return f"| {label_of(labels, r)} | " + " | ".join(cells) + " |"


def _left_out_note(summary: Mapping[str, Any], names: Sequence[str], labels: Mapping[str, str] | None) -> list[str]:
    """A note naming each method that gave no finite value on some cases, rather than drop them silently."""
    rows = summary["rows"]
    missing = [(r, _skipped(rows[r])) for r in names if not is_mcs_row(summary, r)]
    total = summary.get("counts", {}).get("all", "?")
    missing = [f"{label_of(labels, r)} ({n} of {total} cases)" for r, n in missing if n]
    if missing:
        return ["", "Cases left out of a row because the method gave no finite value: " + ", ".join(missing) + "."]
    return []


def _skipped(row: Mapping[str, Any]) -> int:
    """Cases a method row left out (no finite value): its ``all`` cell's count, else the sum."""
    if "all" in row:
        return int(row["all"].get("skipped") or 0)
    return sum(int(cell.get("skipped") or 0) for cell in row.values())


def pearson_table(summary: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> str:
    """Markdown of each estimator's Pearson correlation with the target, by field, from a summary."""
    fields = list(summary["fields"])
    rows = summary["rows"]
    names = [r for r in summary_rows(summary) if not is_mcs_row(summary, r)]
    header = "| Estimator | " + " | ".join(field_label(labels, f) for f in fields) + " |"
    rule = "| --- | " + " | ".join("---" for _ in fields) + " |"
    lines = [header, rule]
    for r in names:
        vals = [fmt(rows[r].get(f, {}).get("pearson")) for f in fields]
        lines.append(f"| {label_of(labels, r)} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# PPO critics: the paper's Table 1
# --------------------------------------------------------------------------------------------

#: the column of the methods without a λ (GRPO) in :func:`table1`
NO_LAMBDA = "no λ"


def table1(summary: dict, methods: Mapping[str, Method], labels: Mapping[str, str] | None = None) -> dict | None:
    """The PPO critics in the layout of the paper's Table 1 (SPEC §4.5), or None when no
    method of ``summary`` reads a trained critic (``ppo-1``, ``ppo-n``).

    Returns ``{"columns": ["λ = 0.95", "λ = 1.0", "no λ"], "rows": [{"label", "cells": {column:
    {"method", "mae", "lo", "hi", "n"}}}]}``: one column per distinct λ of the critic methods
    (a spec without ``lam`` has the default 1.0), sorted, then "no λ"; rows GRPO (each group
    mean method, in "no λ"; without one, the summary's ``grpo_mae`` with no interval and
    ``method`` None), then one row per critic mode (``PPO-1``, ``PPO-N``) with each method in
    its λ column. A cell is the method's overall MAE (the "all" field) with its bootstrap
    interval; a second method of the same mode and λ opens another row."""
    rows = summary["rows"]
    found = {r: methods[r] for r in summary_rows(summary) if not is_mcs_row(summary, r) and r in methods}
    critics = {m: method.critic for m, method in found.items() if method.critic is not None}
    if not critics:
        return None
    columns = [f"λ = {lam_text(lam)}" for lam in sorted({need["lam"] for need in critics.values()})] + [NO_LAMBDA]

    def cell(m: str) -> dict:
        whole = rows[m].get("all") or {}
        return {"method": m, **{k: whole.get(k, math.nan) for k in ("mae", "lo", "hi", "n")}}

    out = [{"label": label_of(labels, m), "cells": {NO_LAMBDA: cell(m)}}
           for m, method in found.items() if method.baseline]
    grpo_mae = (summary.get("grpo_mae") or {}).get("all")
    if not out and finite(grpo_mae):
        n = (summary.get("counts") or {}).get("all", math.nan)
        out.append({"label": GRPO_ROW, "cells": {NO_LAMBDA: {"method": None, "mae": grpo_mae, "lo": math.nan,
                                                           "hi": math.nan, "n": n}}})
    first_critic_row = len(out)
    for m in sorted(critics, key=lambda m: found[m].estimator_label):  # PPO-1, then PPO-N
        name, column = found[m].estimator_label, f"λ = {lam_text(critics[m]['lam'])}"
        row = next((r for r in out[first_critic_row:] if r["label"] == name and column not in r["cells"]), None)
        if row is None:
            row = {"label": name, "cells": {}}
            out.append(row)
        row["cells"][column] = cell(m)
    return {"columns": columns, "rows": out}


def table1_markdown(table: dict | None, level: float = 0.95, resampled: str = "cases") -> str:
    """The markdown of :func:`table1`: a caption (saying the intervals resampled ``resampled``,
    "cases" or "problems", as the summary's ``resampled``), then one line per row, each cell
    ``MAE [lo, hi]`` as in the main table (the MAE alone without an interval), "–" where the row
    has no method of that λ. Empty text for ``None`` (no critic methods)."""
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
        lines.append(f"| {label_of(labels, m)} | " + " | ".join(cells) + " |")
    return lines


def paired_table(paired: dict, labels: dict[str, str] | None = None) -> str:
    """Markdown table of the paired comparison with GRPO by field: one row per method, columns
    the fields then "all", each cell ``ΔMAE [lo, hi]`` (MAE of the method minus MAE of the group
    mean on the same cases, with its paired bootstrap interval; ``*`` where the interval excludes
    0) and the win rate against GRPO (and the tie rate, when not 0). ``paired`` is the dict of
    :func:`hista.sveb.paired.paired_summary`; the first line is a caption."""
    level = paired.get("level", 0.95)
    columns = [("field", f) for f in paired["slices"]["field"]] + [("all", "all")]
    counts = paired["counts"]
    count_text = ", ".join(f"{field_label(labels, name)} {counts[group][name]}" for group, name in columns)
    caption = (
        f"Table: paired comparison with GRPO (the group mean): ΔMAE = MAE(estimator) − MAE(GRPO) on "
        f"the same cases (negative: closer to the target than GRPO), {level:.0%} paired bootstrap "
        f"interval {over(paired)} in brackets (each resample draws the same cases for both), * where "
        f"it excludes 0; win = share of cases where the estimator is strictly closer to the target "
        f"(tie: as close). "
        f"Cases: {count_text}."
    )
    lines = [caption, ""] + _paired_rows(paired, columns, labels, lambda group, name: field_label(labels, name))
    return "\n".join(lines) + "\n"


def slices_table(paired: dict, labels: dict[str, str] | None = None) -> str:
    """Markdown table of the paired comparison with GRPO by relative position t/T (thirds) and by
    response length (terciles), all fields pooled; cells as in :func:`paired_table`. Without any
    case that records its response length, one sentence saying so."""
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
    (:func:`hista.sveb.paired.paired_summary`, a results file's ``paired``), as ``sveb eval``
    prints them."""
    return paired_table(paired, labels) + "\n" + slices_table(paired, labels)


def leak_table(leak: Mapping[str, Any], protocol: str, labels: Mapping[str, str] | None = None) -> str:
    """The leak figure of each method (:func:`hista.sveb.metrics.leak_summary`) under the protocol
    its values were scored by (docs/sveb.md "Protocols"): mean |ΔV| at the state when the state's
    own rollout's reward is flipped, the whole group shown. 0: a valid baseline; 1/G: the group
    mean; more: the value reads the state's own outcome, and its MAE gain may be that."""
    shown = {"leak-free": "the state's own rollout shown without its reward",
             "paper": "every rollout whole, with its reward (the paper's protocol: a value may read its own outcome)"}
    lines = [f"Protocol: `{protocol}` ({shown.get(protocol, protocol)}).", "",
             "| estimator | leak: mean \\|ΔV\\| with the state's own reward flipped |", "|---|---|"]
    for method, value in leak.items():
        lines.append(f"| {(labels or {}).get(method, method)} | {'—' if value is None else f'{value:.3f}'} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# rank metrics and the differences from GRPO
# --------------------------------------------------------------------------------------------


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
        lines.append(f"| {label_of(labels, name)} | {cell['n']} | {_interval_text(cell['rho'])} | "
                     f"{_interval_text(delta.get('rho'), True)} | {_interval_text(cell['rho_within'])} | "
                     f"{_interval_text(cell['auroc'])} | {_interval_text(delta.get('auroc'), True)} |")
    return "\n".join(lines) + "\n"


def differences_table(stats: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str] | None = None) -> str:
    """Markdown of :func:`hista.sveb.figures.difference_stats`: one line per estimator, as the
    histogram panels."""
    lines = ["Table: each estimator's value V minus the GRPO baseline V_GRPO (the case's group mean), "
             "over the cases with both, as in the histograms (the paper's Figure 2); std is the population "
             "standard deviation.", "",
             "| Estimator | n | mean V − V_GRPO | std | mean abs(V − V_GRPO) |", "| --- | --- | --- | --- | --- |"]
    for m, st in stats.items():
        lines.append(f"| {label_of(labels, m)} | {st['n']} | {signed(st['mean'])} | {fmt(st['std'])} | "
                     f"{fmt(st['mean_abs'])} |")
    return "\n".join(lines) + "\n"
