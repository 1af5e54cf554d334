"""The SVEB report's writer: ``report.md`` (the tables of :mod:`hista.sveb.tables`), ``report.json``
(every number the tables and figures show) and the figures of :mod:`hista.sveb.figures`, written
into one folder from a summary (:func:`hista.sveb.metrics.summarise`) and the per-case records it
was computed from. Every file is written atomically (temporary file beside the target, then
``os.replace``), so a reader never sees a half-written report."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..jsonio import check_not_inputs, check_output_dir, write_atomic, write_json_atomic
from . import results as results_file
from .figures import difference_stats, plot_delta, plot_differences, plot_mae
from .labels import report_labels
from .methods import Method, from_results
from .metrics import leak_summary
from .paired import paired_summary
from .present import resampled as over
from .ranks import rank_summary
from .rows import CaseRow
from .segments import segment_summary, segment_table
from .tables import (
    differences_table,
    leak_table,
    markdown_table,
    paired_table,
    pearson_table,
    ranks_table,
    slices_table,
    table1,
    table1_markdown,
)

__all__ = ["report_file", "write_report", "REPORT_FILES"]


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


#: the files ``write_report`` writes into its folder, by key
REPORT_FILES = {"markdown": "report.md", "json": "report.json", "mae_plot": "mae.png",
                "differences_plot": "differences.png", "delta_plot": "delta.png"}


def write_report(
    summary: dict,
    records: Sequence[CaseRow],
    methods: Mapping[str, Method],
    out_dir: str | os.PathLike,
    *,
    paired: dict | None = None,
    protocol: str = "paper",
) -> dict[str, Path]:
    """Write the SVEB report into ``out_dir``: ``report.md`` (title, the Table-4 style MAE table,
    how to read it, the PPO critics in the paper's Table 1 layout when a method reads a critic
    (:func:`hista.sveb.tables.table1`), the paired comparison with GRPO by field and by position
    and length, Pearson table, rank metrics, each estimator's difference from GRPO
    (:func:`hista.sveb.figures.difference_stats`), links to the plots), ``report.json``
    (``{"summary": ..., "paired": ..., "labels": ..., "table1": ... or null, "differences": ...,
    "ranks": ...}``, the labels as the report prints them (:func:`hista.sveb.labels.report_labels`
    of ``methods``, spec -> :class:`hista.sveb.methods.Method`), NaN written as null),
    ``mae.png``, ``differences.png`` and ``delta.png``; also the protocol the values were scored
    by and each method's leak figure (:func:`hista.sveb.tables.leak_table`; ``protocol``:
    ``"paper"`` for results made before issue 63, which record neither). ``paired`` defaults to
    :func:`hista.sveb.paired.paired_summary` of ``records`` and ``methods`` with the summary's
    ``n_boot`` and ``seed``. Each file is written atomically. Returns
    ``{"markdown", "json", "mae_plot", "differences_plot", "delta_plot"}`` -> path."""
    paths = _report_paths(out_dir)
    labels = report_labels(methods)
    plot_mae(summary, paths["mae_plot"], labels=labels)
    plot_differences(records, methods, paths["differences_plot"], labels=labels)
    if paired is None:
        paired = paired_summary(records, list(methods), n_boot=summary.get("n_boot", 2000), seed=summary.get("seed", 0))
    plot_delta(paired, paths["delta_plot"], labels=labels)
    numbers = _report_numbers(summary, records, methods, paired, labels, protocol)
    write_json_atomic(paths["json"], numbers, indent=2)
    md = _report_markdown(numbers, paths)
    write_atomic(paths["markdown"], lambda fh: fh.write(md), kind="markdown")
    return paths


def _report_paths(out_dir: str | os.PathLike) -> dict[str, Path]:
    """The report's files in ``out_dir``, the folder checked and made first, so that a bad folder
    or a non-regular file in the way fails before any plotting."""
    out = Path(out_dir)
    paths = {key: out / name for key, name in REPORT_FILES.items()}
    check_output_dir(out, [p.name for p in paths.values()])
    out.mkdir(parents=True, exist_ok=True)
    return paths


def _report_numbers(summary: dict, records: Sequence[CaseRow], methods: Mapping[str, Method], paired: dict,
                    labels: dict[str, str], protocol: str) -> dict[str, Any]:
    """The content of ``report.json``, in its key order: what every table of ``report.md`` reads."""
    ppo = table1(summary, methods, labels)
    differences = difference_stats(records, methods)
    rank_metrics = rank_summary(records, list(methods), n_boot=summary.get("n_boot", 2000),
                                seed=summary.get("seed", 0))
    return {"summary": summary, "paired": paired, "labels": labels, "table1": ppo, "differences": differences,
            "ranks": rank_metrics, "protocol": protocol, "leak": leak_summary(records, list(methods)),
            "segments": segment_summary(records, list(methods), n_boot=summary.get("n_boot", 2000),
                                        seed=summary.get("seed", 0))}


def _report_markdown(numbers: Mapping[str, Any], paths: Mapping[str, Path]) -> str:
    """The text of ``report.md``: its sections in order, from the numbers of ``report.json``."""
    summary, paired, labels = numbers["summary"], numbers["paired"], numbers["labels"]
    level = summary.get("level", 0.95)
    table1_md = table1_markdown(numbers["table1"], level, summary.get("resampled", "cases"))
    ppo_section = ["## PPO critics (paper Table 1 layout)", "", table1_md] if numbers["table1"] else []
    return "\n".join([
        "# SVEB report",
        "",
        markdown_table(summary, labels),
        _HOW_TO_READ.format(level=f"{level:.0%}", over=over(summary)),
        "",
        *ppo_section,
        "## Leak",
        "",
        leak_table(numbers["leak"], numbers["protocol"], labels),
        "## Segments: credit between two states of one rollout",
        "",
        segment_table(numbers["segments"], labels),
        "## Paired comparison with GRPO",
        "",
        paired_table(paired, labels),
        slices_table(paired, labels),
        "## Pearson correlation with the target",
        "",
        pearson_table(summary, labels),
        "## Rank metrics",
        "",
        ranks_table(numbers["ranks"], labels),
        "## Difference from GRPO (paper Figure 2)",
        "",
        differences_table(numbers["differences"], labels),
        "## Plots",
        "",
        f"![MAE by field with {level:.0%} intervals]({paths['mae_plot'].name})",
        "",
        f"![Difference of each estimator from the group mean]({paths['differences_plot'].name})",
        "",
        f"![ΔMAE of each estimator vs GRPO with {level:.0%} paired intervals]({paths['delta_plot'].name})",
        "",
    ])


def report_file(path: str | os.PathLike, out: str | os.PathLike) -> tuple[dict[str, Path], str]:
    """``sveb report``: read and check the results file ``path`` (:func:`hista.sveb.results.read`),
    recompute its summary from the case rows (:func:`hista.sveb.results.summarise`) and write the
    report into the folder ``out`` (:func:`write_report`), each method as the file records it
    (:func:`hista.sveb.methods.from_results`). Returns the paths written and the markdown MAE
    table (Table 4 layout) to print. Nothing is written when the file is invalid."""
    check_not_inputs([Path(out) / name for name in REPORT_FILES.values()], [path])
    results = results_file.read(path)
    summary = results_file.summarise(results, path=path)
    methods = from_results(results)
    paths = write_report(summary, results["cases"], methods, Path(out), protocol=results.get("protocol", "paper"))
    return paths, markdown_table(summary, report_labels(methods))
