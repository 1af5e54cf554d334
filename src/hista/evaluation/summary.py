"""The summary of an evaluation: per benchmark, per category and overall, from the
per-problem records (:mod:`hista.evaluation.store`).

Per benchmark: avg@n (n samples per problem: k, or 1 when greedy) and the unbiased pass@k' for
every k' ≤ n, each with a bootstrap 95% interval over problems (problems that pose the same
question drawn together: :mod:`hista.evaluation.metrics`), and how many distinct questions the
problems pose; response lengths in tokens
(mean, median, 90th percentile, max; completion tokens including the end-of-sequence token);
the share of responses with no extractable answer (the verifier's reason reads "no ... found":
``no answer found`` for math, ``no choice found`` for multiple choice, ``no code block found``
for code) and the share cut off by ``max_new_tokens``. Per category and overall: the macro
means of :mod:`hista.evaluation.metrics`, avg@n and the pass@k' that every benchmark inside has.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from .metrics import N_BOOT, bootstrap, problem_score

#: A verifier's reason for a response with no extractable answer (SPEC §6 reasons).
NO_ANSWER = re.compile(r"^no .*found$")


def _lengths(records: Sequence[dict]) -> dict:
    tokens = np.asarray([s["tokens"] for r in records for s in r["samples"]], dtype=np.float64)
    return {"mean": float(tokens.mean()), "median": float(np.median(tokens)),
            "p90": float(np.quantile(tokens, 0.9)), "max": int(tokens.max())}


def _share(records: Sequence[dict], test) -> float:
    samples = [s for r in records for s in r["samples"]]
    return sum(1 for s in samples if test(s)) / len(samples)


def summarise(records: Sequence[dict], benchmarks: Sequence[dict], *, seed: int = 0, n_boot: int = N_BOOT) -> dict:
    """The summary of an evaluation (module docstring) from its problem records and
    its benchmarks' settings (``name``, ``category``, ``temperature``, ``samples``; the
    ``benchmarks`` of the results' settings, in order). Every interval comes from
    :func:`hista.evaluation.metrics.bootstrap` with ``seed``; avg and a pass@k' that every
    benchmark has share their resamples. Returns ``{"benchmarks": {name: ...}, "categories":
    {category: ...}, "overall": ...}`` with ``avg`` and ``pass`` (``{"k'": interval}``) in each."""
    by_benchmark: dict[str, list[dict]] = {b["name"]: [] for b in benchmarks}
    for r in records:
        by_benchmark[r["benchmark"]].append(r)
    present = [b for b in benchmarks if by_benchmark[b["name"]]]
    if not present:
        raise ValueError("no problem has been evaluated")
    categories = {b["name"]: b["category"] for b in present}
    samples = {b["name"]: min(len(r["samples"]) for r in by_benchmark[b["name"]]) for b in present}
    questions = {b["name"]: [r["problem"] for r in by_benchmark[b["name"]]] for b in present}

    def scores(metric: str, names: Sequence[str]) -> dict:
        return {n: [problem_score([s["reward"] for s in r["samples"]], metric) for r in by_benchmark[n]]
                for n in names}

    names = [b["name"] for b in present]
    avg = bootstrap(scores("avg", names), categories, n_boot=n_boot, seed=seed, clusters=questions)
    out = {"benchmarks": {}, "categories": {c: {"benchmarks": [n for n in names if categories[n] == c],
                                                 "avg": avg["categories"][c], "pass": {}}
                                            for c in avg["categories"]},
           "overall": {"avg": avg["overall"], "pass": {}}}
    for b in present:
        name, rs = b["name"], by_benchmark[b["name"]]
        out["benchmarks"][name] = {
            "category": categories[name], "problems": len(rs), "questions": len(set(questions[name])),
            "temperature": b["temperature"],
            "samples_per_problem": samples[name], "avg": avg["benchmarks"][name], "pass": {},
            "length": _lengths(rs), "no_answer": _share(rs, lambda s: bool(NO_ANSWER.match(s["reason"]))),
            "truncated": _share(rs, lambda s: s["truncated"])}
    for k in range(1, max(samples.values()) + 1):
        subset = [n for n in names if samples[n] >= k]
        result = bootstrap(scores(f"pass@{k}", subset), categories, n_boot=n_boot, seed=seed, clusters=questions)
        for n in subset:
            out["benchmarks"][n]["pass"][str(k)] = result["benchmarks"][n]
        for c, entry in out["categories"].items():
            if all(n in subset for n in entry["benchmarks"]):
                entry["pass"][str(k)] = result["categories"][c]
        if len(subset) == len(names):
            out["overall"]["pass"][str(k)] = result["overall"]
    return out


def empty_summary() -> dict:
    """The summary of no problems: what an empty shard (one with fewer chunks than
    shards) records; no benchmark, no category and no overall score (the markdown shows n/a)."""
    return {"benchmarks": {}, "categories": {}, "overall": {"avg": None, "pass": {}}}
