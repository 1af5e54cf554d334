"""Credit on segments (issue 63, docs/sveb.md "Segments"): SVEB scores values, training uses their
differences. Two cases on the same rollout, states s_a and s_b (a < b), give the Monte-Carlo change
of value across the tokens between them, target_b − target_a: what those tokens did to the chance
of success. An estimator credits the same tokens with V̂(s_b) − V̂(s_a) (the sum of its one-step
advantages over the segment). An estimator that gives a decisive segment no credit (V̂ flat
across it, as GRPO always is, or zero because the value already holds the outcome) is caught here
before a training run catches it.

Pairs come from the case rows themselves: rows of one problem id (``case_id`` before ``#``) whose
states lie on the same rollout, taken in order of t (a build with ``same_rollout`` places every
state of a problem on one rollout; the ``long`` preset's two states share a rollout by chance).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Optional, Sequence

from .metrics import GRPO_ROW, bootstrap_ci
from .rows import CaseRow

#: |MC change| from which a segment counts as decisive (4 of 16 continuations swing)
DECISIVE = 0.25


def pairs(rows: Sequence[CaseRow]) -> list[tuple[CaseRow, CaseRow]]:
    """Consecutive states (a, b), t_a < t_b, of one rollout of one problem id, in row order of t
    (rows without a ``state``, written before rows recorded it, take no part)."""
    by_rollout: dict[tuple[str, int], list[CaseRow]] = defaultdict(list)
    for row in rows:
        if row.state is not None:
            by_rollout[(row.case_id.split("#")[0], row.state.rollout)].append(row)
    out = []
    for states in by_rollout.values():
        states = sorted(states, key=lambda r: r.state.t)
        out += [(a, b) for a, b in zip(states, states[1:]) if a.state.t < b.state.t]
    return out


def segment_summary(rows: Sequence[CaseRow], methods: Sequence[str], *, n_boot: int = 2000, seed: int = 0,
                    decisive: float = DECISIVE) -> dict[str, Any]:
    """Per method, over the segment pairs of ``rows`` (:func:`pairs`): ``n`` pairs, ``error`` the
    mean |(V̂_b − V̂_a) − (target_b − target_a)| with its bootstrap interval (``lo``, ``hi``,
    over problems), ``sign`` the share of decisive pairs (|MC change| ≥ ``decisive``) whose
    credit has the Monte-Carlo change's sign (a zero credit does not), ``flat`` the share of
    decisive pairs credited less than 0.01 in size. ``n_decisive`` counts those pairs; the GRPO
    row (``grpo``: the group mean, constant along a rollout) is the no-credit baseline."""
    found = pairs(rows)
    problems = [a.case_id.split("#")[0] for a, _ in found]
    mc = [b.target - a.target for a, b in found]
    out: dict[str, Any] = {"n_pairs": len(found), "n_decisive": sum(abs(d) >= decisive for d in mc),
                           "decisive": decisive, "methods": {}}
    for method in list(methods) if "grpo" in methods else ["grpo", *methods]:
        if method in methods:  # NaN where either state has no value
            credit = [b.value(method) - a.value(method) for a, b in found]
        else:  # the group mean, which every case records: the same value at every state of a rollout
            credit = [0.0] * len(found)
        errors = [abs(c - d) for c, d in zip(credit, mc)]
        kept = [k for k, e in enumerate(errors) if not math.isnan(e)]
        sharp = [k for k in kept if abs(mc[k]) >= decisive]
        lo, hi = bootstrap_ci([errors[k] for k in kept], n_boot=n_boot, seed=seed,
                              clusters=[problems[k] for k in kept]) if kept else (math.nan, math.nan)
        out["methods"][method] = {
            "n": len(kept),
            "error": sum(errors[k] for k in kept) / len(kept) if kept else math.nan, "lo": lo, "hi": hi,
            "sign": sum(credit[k] * mc[k] > 0 for k in sharp) / len(sharp) if sharp else math.nan,
            "flat": sum(abs(credit[k]) < 0.01 for k in sharp) / len(sharp) if sharp else math.nan,
        }
    return out


def segment_table(summary: dict, labels: Optional[dict] = None) -> str:
    """The markdown table of :func:`segment_summary`."""
    if not summary["n_pairs"]:
        return "No two states of one rollout among the cases: no segment to score.\n"
    lines = [f"{summary['n_pairs']} segments (two states of one rollout), {summary['n_decisive']} decisive "
             f"(Monte-Carlo change of value ≥ {summary['decisive']:g} in size).", "",
             "| estimator | error of the credit [95%] | sign right on decisive segments | no credit on decisive |",
             "|---|---|---|---|"]
    def share(x: float) -> str:
        return "—" if math.isnan(x) else f"{x:.0%}"

    for method, cell in summary["methods"].items():
        label = (labels or {}).get(method, GRPO_ROW if method == "grpo" else method)
        lines.append(f"| {label} | {cell['error']:.3f} [{cell['lo']:.3f}, {cell['hi']:.3f}] | "
                     f"{share(cell['sign'])} | {share(cell['flat'])} |")
    return "\n".join(lines) + "\n"
