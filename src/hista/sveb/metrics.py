"""SVEB metrics: estimator MAE with bootstrap intervals, Pearson correlation with the
Monte-Carlo target, and the exact MCS@n noise rows of the paper's Table 4.

Everything here is pure (no I/O) and deterministic. A *record* is one benchmark case as the
``eval`` step hands it over, a :class:`hista.sveb.rows.CaseRow`: its ``target`` is the mean of
the M continuation rewards (the MCS@M reference value of the state), its ``values`` the state
value each estimator predicted for it. :func:`summary_rows` and
:func:`is_mcs_row` read the rows of a summary back, for the report's tables and figures.
"""

from __future__ import annotations

import math
from typing import Any, Collection, Hashable, Iterator, Mapping, Optional, Sequence

import numpy as np

from ..bootstrap import clustered_means
from .cases import problem_of
from .rows import CaseRow

__all__ = ["mcs_error", "bootstrap_ci", "pearson", "case_problems", "resampling", "summarise",
           "summary_rows", "is_mcs_row", "MAX_MCS_TERMS"]

#: Largest number of terms ``mcs_error`` will sum for non-binary rewards before refusing.
MAX_MCS_TERMS = 1_000_000


# --------------------------------------------------------------------------------------------
# MCS@n noise
# --------------------------------------------------------------------------------------------


def mcs_error(rewards: Sequence[float], n: int) -> float:
    """Exact expected absolute error of MCS@n against the MCS@M reference.

    Given the M continuation rewards of one state, draw n of them without replacement,
    uniformly over all C(M, n) subsets, and return ``E | mean(subset) - mean(rewards) |``:
    the expected value over subsets, not one random draw (the paper's MCS@1/2/3 rows,
    Table 4).

    * 0/1 rewards with K ones: the number of ones J in the subset is hypergeometric, so
      ``E = sum_j C(K, j) C(M-K, n-j) / C(M, n) * |j/n - K/M|`` in closed form.
    * Other rewards: exact enumeration, grouped by distinct value (a multivariate
      hypergeometric over the counts drawn of each distinct value). This sums at most
      ``C(M, n)`` terms (far fewer when values repeat); more than ``MAX_MCS_TERMS`` raises
      ``ValueError``. Every case with M <= 32 and n <= 3 is well inside the limit.

    ``n == M`` gives 0. ``n < 1``, ``n > M`` or a non-finite reward raise ``ValueError``.
    """
    values, n = _checked_draw(rewards, n)
    if n == len(values):
        return 0.0
    # Distinct values and how often each occurs (sorted, so the summation order is fixed).
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    distinct = sorted(counts)
    if len(distinct) == 1:
        return 0.0
    full_mean = math.fsum(values) / len(values)
    if set(distinct) <= {0.0, 1.0}:
        return _binary_mcs_error(counts.get(1.0, 0), len(values), n, full_mean)
    return _enumerated_mcs_error(distinct, [counts[v] for v in distinct], n, full_mean)


def _checked_draw(rewards: Sequence[float], n: int) -> tuple[list[float], int]:
    """The rewards as floats and ``n`` as an int, refusing a draw ``mcs_error`` cannot define."""
    values = [float(r) for r in rewards]
    m = len(values)
    if isinstance(n, bool) or int(n) != n:
        raise ValueError(f"n must be an integer, got {n!r}")
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if n > m:
        raise ValueError(f"n={n} is larger than the number of continuation rewards M={m}")
    if not all(math.isfinite(v) for v in values):
        raise ValueError("continuation rewards must be finite")
    return values, n


def _binary_mcs_error(k: int, m: int, n: int, full_mean: float) -> float:
    """``mcs_error`` of M 0/1 rewards with K ones in closed form: J ones drawn is hypergeometric."""
    total = math.comb(m, n)
    # int / int division stays exact for huge binomials (no float overflow)
    return math.fsum(
        (math.comb(k, j) * math.comb(m - k, n - j) / total) * abs(j / n - full_mean)
        for j in range(max(0, n - (m - k)), min(n, k) + 1)
    )


def _enumerated_mcs_error(distinct: list[float], multiplicity: list[int], n: int, full_mean: float) -> float:
    """``mcs_error`` of other rewards by exact enumeration of the counts drawn of each distinct
    value (a multivariate hypergeometric), refused above ``MAX_MCS_TERMS`` terms."""
    m = sum(multiplicity)
    total = math.comb(m, n)
    # Upper bound on the number of count vectors: min(C(M, n), C(n + k - 1, k - 1)).
    bound = min(total, math.comb(n + len(distinct) - 1, len(distinct) - 1))
    if bound > MAX_MCS_TERMS:
        raise ValueError(
            f"mcs_error: too many subsets to enumerate exactly (M={m}, n={n}, "
            f"{len(distinct)} distinct reward values; limit {MAX_MCS_TERMS} terms)"
        )
    return math.fsum(
        (weight / total) * abs(math.fsum(c * distinct[i] for i, c in draw) / n - full_mean)
        for draw, weight in _bounded_compositions(multiplicity, n)
    )


def _bounded_compositions(limits: Sequence[int], n: int) -> Iterator[tuple[tuple[tuple[int, int], ...], int]]:
    """Every way to draw n items from groups of sizes ``limits``: yields the non-zero counts
    as ``((group index, count), ...)`` together with the number of subsets that draw stands
    for, prod C(limits[i], c_i)."""
    k = len(limits)
    # room[i]: how many items can still be drawn from groups i..k-1.
    room = [0] * (k + 1)
    for i in range(k - 1, -1, -1):
        room[i] = room[i + 1] + limits[i]
    # Depth-first with an explicit stack (k can exceed Python's recursion limit); a branch
    # ends as soon as nothing is left to draw, so each draw costs O(k) at most.
    stack: list[tuple[int, int, tuple[tuple[int, int], ...], int]] = [(0, n, (), 1)]
    while stack:
        i, left, drawn, weight = stack.pop()
        if left == 0:
            yield drawn, weight
            continue
        if i == k or room[i] < left:
            continue
        stack.append((i + 1, left, drawn, weight))  # none from group i
        for c in range(1, min(left, limits[i]) + 1):
            stack.append((i + 1, left - c, drawn + ((i, c),), weight * math.comb(limits[i], c)))


# --------------------------------------------------------------------------------------------
# Bootstrap and correlation
# --------------------------------------------------------------------------------------------


def bootstrap_ci(
    errors: Sequence[float],
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    clusters: Sequence[Hashable] | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``errors`` (SPEC §8: "MAE with a bootstrap
    95% interval").

    Draws ``n_boot`` resamples of the cases with replacement from ``numpy.random.default_rng(seed)``
    and returns the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of their means:
    the same inputs and seed always give the same interval. NaN entries are ignored; no
    entries left gives ``(nan, nan)``; one entry, or all entries equal, gives ``(x, x)``.

    ``clusters`` (a label per entry, e.g. the case's problem): when a label repeats among the
    entries kept, each resample draws ``k`` labels with replacement from the ``k`` distinct ones
    (numbered in order of first appearance) and its statistic is the mean over every entry of
    the drawn clusters, i.e. the sum of the drawn cluster sums over the sum of their sizes.
    When no label repeats (or ``clusters`` is None) the cases are resampled as above, with the
    same random stream: the same interval bit for bit.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    x = np.asarray([float(e) for e in errors], dtype=np.float64)
    if clusters is not None and len(clusters) != x.size:
        raise ValueError(f"bootstrap_ci: {len(clusters)} cluster labels for {x.size} entries")
    keep = ~np.isnan(x)
    x = x[keep]
    if x.size == 0:
        return (math.nan, math.nan)
    if x.size == 1 or np.all(x == x[0]):
        return (float(x[0]), float(x[0]))
    kept = None if clusters is None else [c for c, k in zip(clusters, keep) if k]
    means = clustered_means(x, kept, n_boot, np.random.default_rng(seed))
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation of ``x`` and ``y`` (SPEC §8: correlation with the target).

    Pairs where either side is NaN/inf are dropped. Returns NaN, without raising or warning,
    when fewer than 2 pairs remain or either side is constant. Sequences of different
    lengths are a programming error and raise ``ValueError``.
    """
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    b = np.asarray(y, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"pearson: x and y differ in length ({a.size} vs {b.size})")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    with np.errstate(all="ignore"):
        da, db = a - a.mean(), b - b.mean()
        denom = math.sqrt(float(np.dot(da, da)) * float(np.dot(db, db)))
        if not denom > 0.0 or not math.isfinite(denom):
            return math.nan
        r = float(np.dot(da, db)) / denom
    return max(-1.0, min(1.0, r))


# --------------------------------------------------------------------------------------------
# Summary table
# --------------------------------------------------------------------------------------------


#: The GRPO baseline of a case is its row's ``group_mean`` (:data:`hista.sveb.rows.GRPO_FIELD`),
#: read through :attr:`hista.sveb.rows.CaseRow.grpo` by every comparison against GRPO (here,
#: ``paired``, ``ranks``, ``sweep``, ``figures``); its MAE is :func:`grpo_mae`.


#: the name of the row a report builds from :data:`GRPO_FIELD` when ``grpo`` is not among the methods
GRPO_ROW = "GRPO"


def grpo_name(names: Collection[str]) -> Optional[str]:
    """What GRPO's baseline is called among ``names`` (a report's rows): the ``grpo`` method when
    it was evaluated, else the :data:`GRPO_ROW` built from each case's :data:`GRPO_FIELD`, else
    None."""
    return "grpo" if "grpo" in names else GRPO_ROW if GRPO_ROW in names else None


def has_grpo(rows: Sequence[CaseRow]) -> bool:
    """Whether there are rows and every one records its GRPO baseline."""
    return bool(rows) and all(math.isfinite(row.grpo) for row in rows)


def grpo_mae(rows: Sequence[CaseRow]) -> float:
    """The MAE of the GRPO baseline over ``rows``: mean |group_mean − target|; NaN
    without rows."""
    errors = [abs(row.grpo - float(row.target)) for row in rows]
    return math.fsum(errors) / len(errors) if errors else math.nan


def case_problems(records: Sequence[CaseRow]) -> list[str]:
    """The problem of each record: its ``problem`` (what ``sveb eval`` records: cases
    that share a prompt are one problem, :func:`hista.sveb.cases.problems_of`) or, when some
    row was written before rows recorded it, the problem id of each ``case_id``."""
    if all(rec.problem is not None for rec in records):
        return [rec.problem for rec in records]
    return [problem_of(rec.case_id) for rec in records]


def resampling(labels: Sequence[str] | None) -> str:
    """What the bootstrap intervals over cases with these problem ``labels`` resample:
    ``"problems"`` when some problem holds more than one case (its cases are not independent),
    else ``"cases"`` (also without labels)."""
    return "problems" if labels is not None and len(set(labels)) < len(labels) else "cases"


def _cell(errors: list[float], xs: list[float] | None, ys: list[float] | None, skipped: int,
          n_boot: int, seed: int, clusters: list[str] | None) -> dict[str, Any]:
    """One summary cell from the absolute errors of its cases: their mean (the MAE), its
    bootstrap interval and Pearson r of ``xs`` with ``ys`` (NaN without them)."""
    lo, hi = bootstrap_ci(errors, n_boot=n_boot, seed=seed, clusters=clusters)
    return {
        "mae": math.fsum(errors) / len(errors) if errors else math.nan,
        "lo": lo,
        "hi": hi,
        "pearson": pearson(xs, ys) if xs is not None else math.nan,
        "n": len(errors),
        "skipped": skipped,
    }


def summarise(
    records: Sequence[CaseRow],
    methods: Sequence[str],
    mcs: Sequence[int] = (1, 2, 3),
    n_boot: int = 2000,
    seed: int = 0,
) -> dict:
    """Per-field SVEB results (the paper's Table 4 and Tables 1-2).

    Returns::

        {"fields": [sorted field names..., "all"],
         "rows": {row: {field: {"mae", "lo", "hi", "pearson", "n", "skipped"}}},
         "methods": [...], "mcs_rows": ["MCS@1", ...], "counts": {field: cases},
         "grpo_mae": {field: mae}   # when every case records its group mean
         "level": 0.95, "n_boot": n_boot, "seed": seed,
         "resampled": "problems" or "cases", "n_problems": int or None}

    Rows, in order: each method (``mae`` = mean |value - target| over the cases, ``lo``/``hi``
    its 95% percentile bootstrap interval, ``pearson`` = r(value, target)), then
    ``MCS@n`` for each n in ``mcs`` (``mae`` = mean over cases of ``mcs_error(continuations,
    n)``, the exact expected error of averaging n of the M continuations; ``pearson`` NaN).
    A case whose value for a method is missing, None or not finite is left out of that method's
    cell and counted in ``skipped``; so is a case with fewer than n continuations for
    ``MCS@n``. ``n`` is the number of cases used. Cells with no cases have NaN statistics.
    ``grpo_mae`` is the MAE of the GRPO baseline, the group mean every case records
    (``group_mean``), whatever methods were evaluated.

    The intervals resample the cases or, when some problem holds more than one of the records
    (:func:`resampling`; a case's problem: :func:`case_problems`), the problems, each
    with all its cases in the cell (:func:`bootstrap_ci` with ``clusters``): ``resampled`` says
    which, ``n_problems`` counts the problems.
    """
    methods, mcs, mcs_rows = _row_keys(methods, mcs)
    by_field = _by_field(records)
    fields = list(by_field)
    labels = case_problems(records)
    problem = dict(zip(map(id, records), labels))
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for method in methods:
        rows[method] = {field: _method_cell(method, recs, n_boot, seed, problem) for field, recs in by_field.items()}
    for k, row in zip(mcs, mcs_rows):
        rows[row] = _mcs_row(k, records, by_field, n_boot, seed, problem)
    summary: dict[str, Any] = {
        "fields": fields,
        "rows": rows,
        "methods": methods,
        "mcs_rows": mcs_rows,
        "counts": {field: len(by_field[field]) for field in fields},
        "level": 0.95,
        "n_boot": n_boot,
        "seed": seed,
        "resampled": resampling(labels),
        "n_problems": len(set(labels)),
    }
    if has_grpo(records):
        summary["grpo_mae"] = {field: grpo_mae(recs) for field, recs in by_field.items()}
    return summary


def leak_summary(records: Sequence[CaseRow], methods: Sequence[str]) -> dict[str, Optional[float]]:
    """Method -> the mean over cases of its ``leak`` (|ΔV| at the state when the state's own
    rollout's reward is flipped; docs/sveb.md "Protocols"): 0 for a valid baseline, 1/G for the
    group mean. None for a method no case records it for (rows made before issue 63)."""
    out: dict[str, Optional[float]] = {}
    for method in methods:
        found = [rec.leak[method] for rec in records if method in rec.leak]
        found = [x for x in found if x is not None and math.isfinite(x)]
        out[method] = sum(found) / len(found) if found else None
    return out


def _row_keys(methods: Sequence[str], mcs: Sequence[int]) -> tuple[list[str], list[int], list[str]]:
    """The methods, the MCS n and the MCS row names, refusing a method named twice or named like
    an MCS row: each key names one row of the summary."""
    methods = list(methods)
    if len(set(methods)) != len(methods):
        raise ValueError(f"duplicate method names in {methods}")
    mcs = [int(k) for k in mcs]
    mcs_rows = [f"MCS@{k}" for k in mcs]
    clash = set(methods) & set(mcs_rows)
    if clash:
        raise ValueError(f"method names clash with MCS rows: {sorted(clash)}")
    return methods, mcs, mcs_rows


def _by_field(records: Sequence[CaseRow]) -> dict[str, list[CaseRow]]:
    """The records of each field, the fields sorted, then every record under "all"."""
    by_field: dict[str, list[CaseRow]] = {}
    for rec in records:
        field = str(rec.field)
        if field == "all":
            raise ValueError("'all' is reserved for the pooled column and cannot be a field name")
        by_field.setdefault(field, []).append(rec)
    return {**{field: by_field[field] for field in sorted(by_field)}, "all": list(records)}


def _clusters(problem: Mapping[int, str], recs: list[CaseRow]) -> list[str]:
    """The problems of these records (by ``id``): the clusters the bootstrap resamples."""
    return [problem[id(rec)] for rec in recs]


def _method_cell(method: str, recs: list[CaseRow], n_boot: int, seed: int,
                 problem: Mapping[int, str]) -> dict[str, Any]:
    """A method's cell over ``recs``: MAE = mean |value - target| over the cases with
    both finite, its bootstrap interval and Pearson r; the others counted in ``skipped``."""
    errors: list[float] = []
    xs: list[float] = []
    ys: list[float] = []
    used: list[CaseRow] = []
    skipped = 0
    for rec in recs:
        v, t = rec.value(method), float(rec.target)
        if math.isnan(v) or not math.isfinite(t):
            skipped += 1
            continue
        errors.append(abs(v - t))
        xs.append(v)
        ys.append(t)
        used.append(rec)
    return _cell(errors, xs, ys, skipped, n_boot, seed, _clusters(problem, used))


def _mcs_row(k: int, records: Sequence[CaseRow], by_field: Mapping[str, list[CaseRow]], n_boot: int, seed: int,
             problem: Mapping[int, str]) -> dict[str, dict[str, Any]]:
    """The ``MCS@k`` row: per field the mean of ``mcs_error(continuations, k)`` over the
    cases with k or more continuations, the others counted in ``skipped``."""
    # The per-case error does not depend on the field: compute it once per case.
    per_case: list[float] = []
    for rec in records:
        conts = rec.continuations
        per_case.append(mcs_error(conts, k) if len(conts) >= k else math.nan)
    error_of = {id(rec): e for rec, e in zip(records, per_case)}
    row = {}
    for field, recs in by_field.items():
        used = [rec for rec in recs if not math.isnan(error_of[id(rec)])]
        kept = [error_of[id(rec)] for rec in used]
        row[field] = _cell(kept, None, None, len(recs) - len(kept), n_boot, seed, _clusters(problem, used))
    return row


# --------------------------------------------------------------------------------------------
# Reading a summary
# --------------------------------------------------------------------------------------------


def summary_rows(summary: Mapping[str, Any]) -> list[str]:
    """The row keys of a summary in the order tables and plots show them: the methods, then the
    MCS rows (from ``methods`` and ``mcs_rows``, or from the ``MCS@`` prefix in a summary that
    does not list them)."""
    rows = summary["rows"]
    mcs_rows = summary.get("mcs_rows") or [r for r in rows if r.startswith("MCS@")]
    methods = summary.get("methods") or [r for r in rows if r not in mcs_rows]
    return [r for r in methods if r in rows] + [r for r in mcs_rows if r in rows]


def is_mcs_row(summary: Mapping[str, Any], row: str) -> bool:
    """Whether ``row`` of a summary is an MCS@n noise row, not an estimator (it never competes)."""
    mcs_rows = summary.get("mcs_rows")
    return row in mcs_rows if mcs_rows is not None else row.startswith("MCS@")
