"""Paired comparison of SVEB estimators with the GRPO baseline (SPEC §8: "Comparisons with GRPO
are paired (the same cases, the same bootstrap resample): ΔMAE with a 95% interval and the win
rate, overall and by field, relative position t/T and response length").

The GRPO baseline of a case is its ``group_mean``. For a method and a case with value ``v``,
target ``t`` and group mean ``g`` the paired difference is ``d = |v - t| - |g - t|``:
negative where the method is closer to the target than GRPO. ΔMAE is the mean of ``d``, and its
interval is the percentile bootstrap of that mean, so each resample draws the same cases for
the method and for GRPO; when some problem holds several cases, each resample draws problems,
with all their cases (:func:`hista.sveb.metrics.bootstrap_ci`). Everything here is pure (no I/O)
and deterministic given ``seed``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .metrics import bootstrap_ci, case_problems, pearson, resampling
from .rows import GRPO_FIELD, CaseRow, finite_or_nan

__all__ = ["paired_summary", "position_slice", "length_slices", "TIE_TOLERANCE", "POSITION_LABELS"]

#: Paired differences closer to 0 than this count as ties (floating-point noise, not a win).
TIE_TOLERANCE = 1e-12
#: Labels of the relative-position thirds t/T in [0, 1/3), [1/3, 2/3), [2/3, 1].
POSITION_LABELS = ("t/T [0, 1/3)", "t/T [1/3, 2/3)", "t/T [2/3, 1]")


def _length(row: CaseRow) -> int | None:
    """The row's response length (completion tokens) when it is a positive integer, else None."""
    n = row.length
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def position_slice(row: CaseRow) -> str | None:
    """The relative-position third of a case's state: ``t / length`` in [0, 1/3),
    [1/3, 2/3) or [2/3, 1], as one of ``POSITION_LABELS``. None when the row records no positive
    integer ``length``, no state, or ``t`` lies outside ``[0, length]``."""
    n = _length(row)
    t = None if row.state is None else row.state.t
    if n is None or isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= n:
        return None
    # 3t < n and 3t < 2n in integers: exact at the boundaries (t/T = 1/3 is the middle third)
    return POSITION_LABELS[0] if 3 * t < n else POSITION_LABELS[1] if 3 * t < 2 * n else POSITION_LABELS[2]


def length_slices(rows: Sequence[CaseRow]) -> tuple[list[str | None], list[float]]:
    """Response-length terciles of the rows: the cut points are the 1/3 and 2/3
    quantiles of the lengths of the rows that record one (``numpy.quantile``, linear); a row
    goes to the first tercile if its length is <= the first cut, to the second if <= the second,
    else to the third. Each tercile is labelled with the range of lengths it holds
    (``"length 12-30"``, or ``"length 12"`` for one length); a tie-heavy sample can leave a
    tercile empty, and it then has no label. Returns the label of each row (None without a
    length) and the two cut points (empty when no row has a length)."""
    lengths = [_length(row) for row in rows]
    known = [n for n in lengths if n is not None]
    if not known:
        return [None] * len(rows), []
    q1, q2 = (float(q) for q in np.quantile(np.asarray(known, dtype=np.float64), [1 / 3, 2 / 3]))
    tercile = [None if n is None else 0 if n <= q1 else 1 if n <= q2 else 2 for n in lengths]
    ranges: dict[int, tuple[int, int]] = {}
    for n, k in zip(lengths, tercile):
        if k is not None:
            lo, hi = ranges.get(k, (n, n))
            ranges[k] = (min(lo, n), max(hi, n))
    names = {k: f"length {lo}" if lo == hi else f"length {lo}-{hi}" for k, (lo, hi) in ranges.items()}
    return [None if k is None else names[k] for k in tercile], [q1, q2]


def _cell(diffs: list[float], errors: list[float], grpo_errors: list[float], values: list[float],
          targets: list[float], skipped: int, n_boot: int, seed: int, level: float,
          clusters: list[str]) -> dict[str, Any]:
    """Paired statistics of one method on one slice from its kept cases (their problems:
    ``clusters``)."""
    n = len(diffs)
    if len(set(clusters)) >= 2:  # the problems the cases come from (each its own when none shares one)
        lo, hi = bootstrap_ci(diffs, n_boot=n_boot, seed=seed, level=level, clusters=clusters)
    else:  # no interval from fewer than 2 cases (or problems)
        lo, hi = math.nan, math.nan
    wins = sum(1 for d in diffs if d < -TIE_TOLERANCE)
    losses = sum(1 for d in diffs if d > TIE_TOLERANCE)
    mae = math.fsum(errors) / n if n else math.nan
    grpo_mae = math.fsum(grpo_errors) / n if n else math.nan
    return {
        "mae": mae,
        "grpo_mae": grpo_mae,
        "delta": math.fsum(diffs) / n if n else math.nan,
        "lo": lo,
        "hi": hi,
        "excludes_zero": bool(lo > 0.0 or hi < 0.0),  # False for NaN
        "win": wins / n if n else math.nan,
        "tie": (n - wins - losses) / n if n else math.nan,
        "loss": losses / n if n else math.nan,
        "pearson": pearson(values, targets),
        "n": n,
        "skipped": skipped,
    }


def paired_summary(rows: Sequence[CaseRow], methods: Sequence[str], n_boot: int = 2000,
                   seed: int = 0, level: float = 0.95) -> dict:
    """Paired comparison of each method with GRPO, the row's ``group_mean``.

    For every method and slice of the cases: ``mae`` (mean |value - target|), ``grpo_mae``
    (mean |group_mean - target| on the same cases), ``delta`` = ``mae - grpo_mae``, ``lo``/``hi``
    its percentile bootstrap interval at ``level`` (the mean of the per-case differences
    ``|v - t| - |g - t|`` over ``n_boot`` resamples of the cases drawn from
    ``numpy.random.default_rng(seed)``: the same resampled cases for the method and for GRPO, and
    the same indices for every method with the same number of cases; when some problem holds
    several of the rows, resamples of the problems, each with its cases in the cell, as
    :func:`hista.sveb.metrics.summarise` does), ``excludes_zero``,
    ``win``/``tie``/``loss`` (fractions of cases where the method is strictly closer to the
    target than GRPO, as close within ``TIE_TOLERANCE``, farther), ``pearson`` r(value, target),
    ``n`` (cases used) and ``skipped`` (cases of the slice left out because the method's value,
    the target or the group mean is missing, None or not finite). Fewer than 2 cases (or, resampling
    problems, fewer than 2 problems) give NaN intervals; no cases NaN statistics.

    Slices, in four groups: ``all``; each ``field`` (sorted); the ``position`` thirds
    of t/length (:func:`position_slice`) and the response-``length`` terciles
    (:func:`length_slices`), both over the rows that record a ``length`` (others are left out
    of those two groups and counted in ``no_length``). Returns::

        {"methods": [...], "baseline": "group_mean", "level", "n_boot", "seed",
         "resampled": "problems" or "cases", "n_problems": int,
         "slices": {group: [slice names]}, "counts": {group: {slice: cases}},
         "length_cuts": [q1, q2], "no_length": int,
         "rows": {method: {group: {slice: cell}}}}
    """
    methods = list(methods)
    _check_inputs(methods, n_boot, level)
    length_of, cuts = length_slices(rows)
    members = _members(rows, length_of)
    targets = [finite_or_nan(row.target) for row in rows]
    grpo = [row.grpo for row in rows]
    problems = case_problems(rows)
    out_rows: dict[str, dict[str, dict[str, Any]]] = {}
    for method in methods:
        values = [row.value(method) for row in rows]
        out_rows[method] = {group: {name: _slice_cell(cases, values, targets, grpo, problems, n_boot, seed, level)
                                    for name, cases in slices.items()}
                            for group, slices in members.items()}
    return {
        "methods": methods,
        "baseline": GRPO_FIELD,
        "level": level,
        "n_boot": n_boot,
        "seed": seed,
        "resampled": resampling(problems),
        "n_problems": len(set(problems)),
        "slices": {group: list(slices) for group, slices in members.items()},
        "counts": {group: {name: len(cases) for name, cases in slices.items()} for group, slices in members.items()},
        "length_cuts": cuts,
        "no_length": sum(1 for s in length_of if s is None),
        "rows": out_rows,
    }


def _check_inputs(methods: list[str], n_boot: int, level: float) -> None:
    """Refuse a method named twice, or a bootstrap without resamples or level, before anything is
    computed."""
    if len(set(methods)) != len(methods):
        raise ValueError(f"duplicate method names in {methods}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def _members(rows: Sequence[CaseRow], length_of: list[str | None]) -> dict[str, dict[str, list[int]]]:
    """The slices of the four groups in their order (``all``; the fields sorted; the position
    thirds; the length terciles by their shortest length), each with the indices of its rows."""
    slice_of = {  # group -> the slice each row belongs to (None: not in that group)
        "all": ["all"] * len(rows),
        "field": [str(row.field) for row in rows],
        "position": [position_slice(row) for row in rows],
        "length": length_of,
    }
    present = {group: set(names) - {None} for group, names in slice_of.items()}
    slices = {
        "all": ["all"],
        "field": sorted(present["field"]),
        "position": [p for p in POSITION_LABELS if p in present["position"]],
        "length": sorted(present["length"], key=lambda name: int(name.split()[1].split("-")[0])),
    }
    return {group: {name: [i for i, s in enumerate(slice_of[group]) if s == name] for name in names}
            for group, names in slices.items()}


def _slice_cell(cases: list[int], values: list[float], targets: list[float], grpo: list[float],
                problems: list[str], n_boot: int, seed: int, level: float) -> dict[str, Any]:
    """One method's paired cell on the rows ``cases`` of a slice: the per-case
    differences ``|v - t| - |g - t|`` of the cases with a value, a target and a group mean."""
    used = [i for i in cases if not (math.isnan(values[i]) or math.isnan(targets[i]) or math.isnan(grpo[i]))]
    errors = [abs(values[i] - targets[i]) for i in used]
    grpo_errors = [abs(grpo[i] - targets[i]) for i in used]
    diffs = [e - g for e, g in zip(errors, grpo_errors)]
    clusters = [problems[i] for i in used]
    return _cell(diffs, errors, grpo_errors, [values[i] for i in used], [targets[i] for i in used],
                 len(cases) - len(diffs), n_boot, seed, level, clusters)
