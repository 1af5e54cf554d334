"""A naive Hista, the readable oracle of SPEC §4.3 steps 1-5 (default profile): plain Python
loops over lists of vectors, written from the SPEC text and nothing else. For tests and
documentation only; nothing uses it at run time (:mod:`hista.estimators.hista` and
:mod:`hista.estimators.min_distance` compute the same numbers in bulk).

Coordinates as in :mod:`hista.estimators.hista`: c counts completion tokens, a prefix is a list
of compressed vectors.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

Vector = Sequence[float]


def represent(hidden: Sequence[Vector], prompt_len: int, c: int, alpha: float, stride: int,
              include_prompt: bool) -> list[Vector]:
    """The prefix representing the state with c completion tokens (SPEC §4.3 steps 1-2): the
    zero-initialised, bias-corrected EMA from the first represented position, every stride-th
    smoothed vector, of the positions before P + c."""
    start = 0 if include_prompt else prompt_len
    m, out = [0.0] * (len(hidden[0]) if len(hidden) else 0), []
    for k, x in enumerate(hidden[start : prompt_len + c]):
        m = [alpha * a + (1 - alpha) * b for a, b in zip(m, x)]
        if k % stride == 0:
            out.append([a / (1 - alpha ** (k + 1)) for a in m])
    return out


def min_distance(query: Sequence[Vector], candidate: Sequence[Vector], normalise: bool = True) -> float:
    """MinDistance (SPEC §4.3 step 4): the sum over the longer prefix (the query on a tie) of each
    vector's distance to its nearest vector of the other, divided by the longer length when
    ``normalise``; +inf when either prefix is empty."""
    if not query or not candidate:
        return math.inf
    longer, shorter = (query, candidate) if len(query) >= len(candidate) else (candidate, query)
    total = sum(min(math.dist(u, v) for v in shorter) for u in longer)
    return total / len(longer) if normalise else total


def knn_value(distances: Sequence[float], rewards: Sequence[float], k: int, min_distance: float, power: float,
              fallback: float, tie_rtol: float = 1e-4) -> float:
    """The k-nearest estimate (SPEC §4.3 step 5): NaN → +inf, clamp below at ``min_distance``,
    weights d^(−power) (0 at +inf) on the k nearest, V = Σ w r / Σ w, ``fallback`` when Σ w = 0.
    Candidates within ``tie_rtol`` of the k-th distance share the places left equally."""
    d = [math.inf if math.isnan(x) else max(x, min_distance) for x in distances]
    k = min(k, len(d))
    if k == 0:
        return fallback
    kth = sorted(d)[k - 1]
    closer = [x < kth * (1 - tie_rtol) for x in d]
    tied = [not near and x <= kth * (1 + tie_rtol) for x, near in zip(d, closer)]
    share = max(0, k - sum(closer)) / max(1, sum(tied))
    chosen = [1.0 if near else share if tie else 0.0 for near, tie in zip(closer, tied)]
    weights = [w * x ** -power if math.isfinite(x) else 0.0 for w, x in zip(chosen, d)]
    total = sum(weights)
    return sum(w * r for w, r in zip(weights, rewards)) / total if total > 0 else fallback


def start_value(rewards: Sequence[float], owner: Optional[int], include_self: bool) -> float:
    """V of the state with no completion token of rollout ``owner`` (None: an external prefix),
    also the estimate when every weight is 0 (docs/estimators.md "Valid baselines"): the mean
    reward of the other rollouts, or with ``include_self`` (and where there is no other) of
    all."""
    others = [r for j, r in enumerate(rewards) if j != owner]
    chosen = others if others and not include_self else rewards
    return sum(chosen) / len(chosen)


def state_value(query: Sequence[Vector], owner: Optional[int], c: int, length: int,
                nodes: Sequence[tuple[int, int, Sequence[Vector], float]], config, fallback: float) -> float:
    """V of the state with c tokens of rollout ``owner`` (None: an external prefix), T =
    ``length``, represented by ``query`` (SPEC §4.3 step 5 and default-profile details).
    ``nodes``: every node of the group as (rollout, c', prefix, reward); the candidates are the
    non-empty nodes of the other rollouts and, with ``include_self``, the owner's with c' ≤ c;
    k(c) = round(max_k − (max_k − min_k)·c/T)."""
    candidates = [(prefix, reward) for rollout, c_node, prefix, reward in nodes
                  if prefix and (rollout != owner or (config.include_self and c_node <= c))]
    k = round(config.max_k - (config.max_k - config.min_k) * (c / length if length else 0.0))
    distances = [min_distance(query, prefix, config.normalise) for prefix, _ in candidates]
    return knn_value(distances, [r for _, r in candidates], k, config.min_distance, config.power, fallback)
