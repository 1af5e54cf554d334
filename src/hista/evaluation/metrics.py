"""Evaluation metrics: accuracy avg@k, the unbiased pass@k, their macro averages by
category and overall, and stratified bootstrap intervals over problems, single and paired.

Pure and deterministic: no I/O, no model. A *problem score* is one number per problem (its
share of correct samples for avg@k, its pass@k estimate for pass@k); a benchmark's score is the
mean of its problems' scores. As in the paper's tables (Tables 5-8), a category's score is the
mean of its benchmarks' scores and the overall score the mean of the categories' scores, so a
small benchmark (AIME, 60 problems) weighs as much as a large one (GSM8K, 1,319).

Intervals are percentile bootstrap intervals over problems, *stratified by benchmark*: each
resample draws every benchmark's problems with replacement (as many as it has), and the same
resample gives the benchmark, category and overall values, so that all intervals of one table
come from one set of resamples. Problems that pose the same question (a built-in generator's
test split can hold a question twice) are one cluster, drawn or left out together, so that a
repeated question does not count as independent evidence; the point estimate stays the mean
over problems. A paired interval resamples problem-wise differences between two runs on the
same problems, clustered the same way.
"""

from __future__ import annotations

import math
from typing import Hashable, Mapping, Optional, Sequence

import numpy as np

from ..bootstrap import clustered_means

__all__ = ["LEVEL", "N_BOOT", "bootstrap", "mean_interval", "pass_at_k", "problem_score"]

#: Bootstrap resamples of every interval.
N_BOOT = 2000
#: Two-sided level of every interval.
LEVEL = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate of one problem with ``c`` correct samples out of ``n``
    (Chen et al. 2021, the Codex paper): ``1 − C(n − c, k) / C(n, k)``, the chance
    that k samples drawn without replacement from the n include a correct one. Exact (integer
    binomials); ``k`` must lie in [1, n] and ``c`` in [0, n], else ValueError."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise ValueError(f"n, c and k must be integers, got {n!r}, {c!r}, {k!r}")
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, n={n}], got {k}")
    if not 0 <= c <= n:
        raise ValueError(f"c must lie in [0, n={n}], got {c}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def problem_score(rewards: Sequence[float], metric: str) -> float:
    """One problem's score under ``metric`` from the rewards of its n samples:
    ``"avg"``, the mean reward (avg@n: the share of correct samples for 0/1 rewards), or
    ``"pass@K"``, the unbiased pass@K with a sample counted correct when its reward is 1 (K ≤ n)."""
    if not rewards:
        raise ValueError("a problem needs at least one sample")
    if metric == "avg":
        return math.fsum(float(r) for r in rewards) / len(rewards)
    if metric.startswith("pass@"):
        k = int(metric[5:])
        return pass_at_k(len(rewards), sum(1 for r in rewards if float(r) >= 1.0), k)
    raise ValueError(f"unknown metric {metric!r}: use avg or pass@K")


def _interval(values: np.ndarray, point: float) -> dict:
    if values.size == 0 or not np.isfinite(values).all():
        return {"mean": point, "lo": point, "hi": point}
    lo, hi = np.quantile(values, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {"mean": point, "lo": float(lo), "hi": float(hi)}


def mean_interval(scores: Sequence[float], n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """``{"mean", "lo", "hi"}``: the mean of ``scores`` with its percentile bootstrap 95%
    interval over the entries, seeded."""
    return bootstrap({"x": list(scores)}, {"x": "x"}, n_boot=n_boot, seed=seed)["benchmarks"]["x"]


def bootstrap(scores: Mapping[str, Sequence[float]], categories: Mapping[str, str], *, n_boot: int = N_BOOT,
              seed: int = 0, clusters: Optional[Mapping[str, Sequence[Hashable]]] = None) -> dict:
    """Benchmark, category and overall means of per-problem ``scores`` (benchmark -> the
    scores of its problems, in a fixed order) with stratified bootstrap 95% intervals (SPEC §10;
    module docstring). ``categories`` maps each benchmark to its category. Returns
    ``{"benchmarks": {name: interval}, "categories": {category: interval}, "overall": interval}``
    where an interval is ``{"mean", "lo", "hi"}``; categories in order of first appearance.
    Resamples come from ``numpy.random.default_rng(seed)``, benchmark by benchmark in the order
    of ``scores``: the same inputs and seed give the same intervals, and two metrics of the same
    problems bootstrapped with the same seed share their resamples. ``clusters`` (benchmark ->
    one label per score, e.g. the problem's text) makes problems with equal labels one cluster
    of the resample (module docstring); a benchmark without repeated labels draws as without."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    means, draws = {}, {}
    for name, values in scores.items():
        x = np.asarray([float(v) for v in values], dtype=np.float64)
        if x.size == 0:
            raise ValueError(f"benchmark {name!r} has no problems")
        means[name] = float(x.mean())
        draws[name] = clustered_means(x, (clusters or {}).get(name), n_boot, rng)
    groups: dict[str, list[str]] = {}
    for name in scores:
        groups.setdefault(categories[name], []).append(name)
    out = {"benchmarks": {name: _interval(draws[name], means[name]) for name in scores}, "categories": {}}
    category_draws, category_means = [], []
    for category, names in groups.items():
        point = math.fsum(means[n] for n in names) / len(names)
        resampled = np.mean([draws[n] for n in names], axis=0)
        out["categories"][category] = _interval(resampled, point)
        category_draws.append(resampled)
        category_means.append(point)
    out["overall"] = _interval(np.mean(category_draws, axis=0), math.fsum(category_means) / len(category_means))
    return out
