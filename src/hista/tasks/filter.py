"""Difficulty filtering of problems by measured policy accuracy."""

from __future__ import annotations

import math
from typing import Sequence

from hista.errors import InputError

_EPS = 1e-6


def _finite_float(v: object) -> float | None:
    """``v`` as a finite float (plain, numpy or 0-d tensor numbers), else None."""
    if isinstance(v, (bool, str, bytes)):
        return None
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def filter_by_accuracy(problems: Sequence[dict], accuracies: Sequence[float],
                       lo: float = 0.1, hi: float = 0.8) -> list[dict]:
    """Keep the problems whose accuracy lies in ``[lo, hi]`` inclusive.

    ``accuracies[i]`` is the measured accuracy of ``problems[i]`` under the policy, e.g. the
    mean reward of n samples (the paper keeps 0.1-0.8 of 20 samples).  The bounds get a
    1e-6 tolerance, so 0.8 stored as float32 still counts as 0.8.  Order is preserved.
    Raises InputError when the lengths differ, ``lo > hi``, or a value is not a finite number.
    """
    problems, accuracies = list(problems), list(accuracies)
    if len(problems) != len(accuracies):
        raise InputError(f"got {len(problems)} problems but {len(accuracies)} accuracies",
                         field="accuracies")
    for name, v in (("lo", lo), ("hi", hi)):
        if _finite_float(v) is None:
            raise InputError(f"must be a finite number, got {v!r}", field=name)
    lo, hi = float(lo), float(hi)
    if lo > hi:
        raise InputError(f"lo ({lo}) must not exceed hi ({hi})", field="lo")
    kept = []
    for i, (p, a) in enumerate(zip(problems, accuracies)):
        acc = _finite_float(a)
        if acc is None:
            raise InputError(f"accuracies[{i}] must be a finite number, got {a!r}",
                             field="accuracies")
        if lo - _EPS <= acc <= hi + _EPS:
            kept.append(p)
    return kept
