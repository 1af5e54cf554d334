"""SVEB rank metrics beside MAE (docs/sveb.md "Rank metrics"): Spearman ρ between the
estimated and the Monte-Carlo values of the states, over all cases and within problem, and the
AUROC of telling a successful continuation from a failed one by V(s), each with a bootstrap
interval and a paired difference against GRPO (the group mean).

Reading order:

1. ``ranks``, ``spearman``    average ranks (ties share theirs); ρ = Pearson r of the ranks
2. ``auroc``                  weighted AUROC: case i holds ``wins[i]`` successful and
                              ``losses[i]`` failed continuations, all scored V(s_i)
3. ``Row``, ``rows_of``       per row (GRPO, each method, MCS@k) the values, targets, wins and
                              losses of the cases it scores
4. ``rank_summary``           point values, percentile intervals and paired differences, every
                              row on the same resamples (of problems when a problem holds
                              several cases, else of cases)

A continuation succeeds when its reward is 1 and fails when it is 0; partial rewards count in ρ
(through the target) but not in the AUROC. An ``MCS@k`` row scores a case by the mean of its
first k continuations and is judged on the other M − k only (ρ against their mean, the AUROC on
them), so that it never scores its own samples; its cases need M > k. Pure and deterministic
given ``seed``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from .metrics import GRPO_ROW, case_problems, grpo_name, has_grpo, pearson, resampling
from .rows import CaseRow

__all__ = ["ranks", "spearman", "auroc", "rank_summary", "STATISTICS", "MIN_WITHIN"]

#: the statistics of a row, in the order reports print them
STATISTICS = ("rho", "rho_within", "auroc")
#: fewest cases a problem needs for its within-problem ρ (with 2: +1 or −1, whether the pair is in order)
MIN_WITHIN = 2


def ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks 1..n of ``x`` (tied entries share the mean of their ranks)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], x.size]
    mean_rank = (starts + ends + 1) / 2.0  # ranks start..end-1 (0-based) -> their mean, 1-based
    out = np.empty(x.size, dtype=np.float64)
    out[order] = np.repeat(mean_rank, ends - starts)
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ of ``x`` and ``y``: the Pearson correlation of their average ranks; pairs with
    a non-finite side dropped; NaN for fewer than 2 pairs or a constant side."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    if keep.sum() < 2:
        return math.nan
    return pearson(ranks(a[keep]), ranks(b[keep]))


def auroc(scores: Sequence[float], wins: Sequence[float], losses: Sequence[float]) -> float:
    """The probability that a successful continuation's state scores above a failed one's (ties
    count one half), case i weighing ``wins[i]`` successes and ``losses[i]`` failures at score
    ``scores[i]``; NaN without a success or without a failure."""
    s = np.asarray(scores, dtype=np.float64)
    w, v = np.asarray(wins, dtype=np.float64), np.asarray(losses, dtype=np.float64)
    keep = np.isfinite(s)
    s, w, v = s[keep], w[keep], v[keep]
    total_w, total_v = w.sum(), v.sum()
    if total_w <= 0 or total_v <= 0:
        return math.nan
    levels, which = np.unique(s, return_inverse=True)
    wins_at, losses_at = np.bincount(which, w, levels.size), np.bincount(which, v, levels.size)
    below = np.cumsum(losses_at) - losses_at  # failures scored strictly lower
    return float((wins_at * (below + 0.5 * losses_at)).sum() / (total_w * total_v))


@dataclasses.dataclass
class Row:
    """The cases one row scores: their indices among the records, values, targets, successes
    and failures."""

    cases: np.ndarray
    values: np.ndarray
    targets: np.ndarray
    wins: np.ndarray
    losses: np.ndarray


def _outcomes(rewards: Sequence[float]) -> tuple[int, int]:
    """The successful (reward 1) and failed (reward 0) continuations among ``rewards``."""
    return sum(1 for r in rewards if r == 1), sum(1 for r in rewards if r == 0)


def rows_of(records: Sequence[CaseRow], methods: Sequence[str], mcs: Sequence[int]) -> dict[str, Row]:
    """GRPO (each case's ``group_mean``, unless ``grpo`` is one of the methods), each method and
    each MCS@k as :class:`Row` (module docstring); a case a row cannot score (a missing value,
    too few continuations) is left out of that row."""
    out: dict[str, Row] = {}

    def row(entries: list[tuple[int, float, float, int, int]]) -> Row:
        cols = list(zip(*entries)) if entries else [[], [], [], [], []]
        return Row(*(np.asarray(c, dtype=np.int64 if k == 0 else np.float64) for k, c in enumerate(cols)))

    def own(i: int, rec: CaseRow, value: float) -> tuple[int, float, float, int, int]:
        return (i, value, float(rec.target), *_outcomes(rec.continuations))

    if "grpo" not in methods and has_grpo(records):
        out[GRPO_ROW] = row([own(i, rec, rec.grpo) for i, rec in enumerate(records)])
    for method in methods:
        out[method] = row([own(i, rec, rec.value(method)) for i, rec in enumerate(records)
                           if math.isfinite(rec.value(method))])
    for k in mcs:
        entries = []
        for i, rec in enumerate(records):
            conts = [float(c) for c in rec.continuations]
            if len(conts) > k:
                rest = conts[k:]
                entries.append((i, math.fsum(conts[:k]) / k, math.fsum(rest) / len(rest), *_outcomes(rest)))
        out[f"MCS@{k}"] = row(entries)
    return out


def _within(row: Row, problem: np.ndarray) -> dict[int, float]:
    """Each problem's ρ among its cases in ``row`` (problems with at least MIN_WITHIN cases and
    a ρ)."""
    out = {}
    owners = problem[row.cases]
    for p in np.unique(owners):
        mine = owners == p
        if mine.sum() >= MIN_WITHIN:
            rho = spearman(row.values[mine], row.targets[mine])
            if math.isfinite(rho):
                out[int(p)] = rho
    return out


def _statistics(row: Row, weight: np.ndarray, drawn: np.ndarray, within: dict[int, float]) -> dict[str, float]:
    """ρ, within-problem ρ and AUROC of ``row`` with each case repeated ``weight[case]`` times
    and each problem ``drawn[problem]`` times (a resample; all ones: the data themselves)."""
    times = weight[row.cases]
    picked = np.repeat(np.arange(row.cases.size), times)
    within_value = math.nan
    if within:
        multiplicity = drawn[list(within)].astype(np.float64)
        if multiplicity.sum() > 0:
            within_value = float(np.dot(multiplicity, list(within.values())) / multiplicity.sum())
    return {"rho": spearman(row.values[picked], row.targets[picked]),
            "rho_within": within_value,
            "auroc": auroc(row.values, row.wins * times, row.losses * times)}


def rank_summary(records: Sequence[CaseRow], methods: Sequence[str], mcs: Sequence[int] = (1, 2),
                 n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """Rank metrics of every row (module docstring)::

        {"rows": {row: {"n": cases, "rho": {"value", "lo", "hi"}, "rho_within": {...},
                        "auroc": {...}, "delta": {"rho": {"value", "lo", "hi"}, "auroc": {...}}}},
         "order": [rows], "level", "n_boot", "seed", "resampled": "problems" or "cases"}

    Intervals are percentile bootstraps over ``n_boot`` resamples drawn once for all rows (so
    ``delta``, the row minus GRPO on the same resample, is paired); a resample draws problems
    (each with all its cases) when some problem holds several cases, else cases. ``delta`` is
    absent for GRPO (the ``grpo`` method, else the ``GRPO`` row of the group means), for the MCS
    rows (other cases, other targets) and without a GRPO row."""
    labels = case_problems(records)
    numbers: dict[str, int] = {}
    problem = np.asarray([numbers.setdefault(u, len(numbers)) for u in labels], dtype=np.int64)
    clustered = resampling(labels) == "problems"
    rows = rows_of(records, methods, mcs)
    ones = np.ones(len(records), dtype=np.int64)
    within = {name: _within(row, problem) for name, row in rows.items()}
    point = {name: _statistics(row, ones, np.ones(len(numbers), dtype=np.int64), within[name])
             for name, row in rows.items()}
    draws = _resampled(rows, within, problem, len(numbers), clustered, n_boot, seed)
    alpha = (1.0 - level) / 2.0
    base = grpo_name(rows)
    out: dict[str, Any] = {}
    for name, row in rows.items():
        paired = base is not None and name != base and not name.startswith("MCS@")
        out[name] = _row_cell(row, draws[name], point[name], (draws[base], point[base]) if paired else None, alpha)
    return {"rows": out, "order": list(rows), "level": level, "n_boot": n_boot, "seed": seed,
            "resampled": "problems" if clustered else "cases"}


def _resampled(rows: Mapping[str, Row], within: Mapping[str, dict[int, float]], problem: np.ndarray, problems: int,
               clustered: bool, n_boot: int, seed: int) -> dict[str, list[dict[str, float]]]:
    """Each row's statistics on ``n_boot`` resamples of problems (``clustered``) or cases, drawn once for all."""
    units = problems if clustered else problem.size
    rng = np.random.default_rng(seed)
    draws: dict[str, list[dict[str, float]]] = {name: [] for name in rows}
    for _ in range(n_boot):
        picked = np.bincount(rng.integers(0, units, units), minlength=units)
        weight, drawn = (picked[problem], picked) if clustered else (picked, np.bincount(problem, picked, problems))
        for name, row in rows.items():
            draws[name].append(_statistics(row, weight, drawn.astype(np.int64), within[name]))
    return draws


def _row_cell(row: Row, draws: list[dict[str, float]], point: dict[str, float],
              base: tuple[list[dict[str, float]], dict[str, float]] | None, alpha: float) -> dict[str, Any]:
    """A row's cases, statistics and intervals, and with GRPO's draws as ``base`` its paired differences."""
    cell: dict[str, Any] = {"n": int(row.cases.size)}
    for stat in STATISTICS:
        cell[stat] = _interval([d[stat] for d in draws], point[stat], alpha)
    if base is not None:
        base_draws, base_point = base
        cell["delta"] = {stat: _interval([d[stat] - g[stat] for d, g in zip(draws, base_draws)],
                                         point[stat] - base_point[stat], alpha) for stat in ("rho", "auroc")}
    return cell


def _interval(values: list[float], value: float, alpha: float) -> dict[str, float]:
    """``value`` with the percentile interval of its finite resampled values (NaN ends without)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite or not math.isfinite(value):
        return {"value": value, "lo": math.nan, "hi": math.nan}
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return {"value": value, "lo": float(lo), "hi": float(hi)}
