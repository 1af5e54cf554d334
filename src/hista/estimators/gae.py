"""GAE, all of it (SPEC §4.2 step 'A_k = δ_k + λ A_{k+1}', §4.3 step 6, §4.5): over segments of a
completion (Numca, Hista, MC), and per token with the reward after the last token and γ = 1
(the PPO critics' advantages and regression targets). Pure tensor math: no model, no I/O."""

from __future__ import annotations

from typing import Sequence

import torch

from ..types import RolloutGroup
from .base import check_finite


def segment_gae(boundaries: Sequence[int], values: torch.Tensor, length: int, gae_lambda: float = 1.0) -> torch.Tensor:
    """Per-token advantages of one rollout from values at segment boundaries.

    ``boundaries`` = [c_0 = 0, c_1, ..., c_{K+1} = T] (non-decreasing completion positions) and
    ``values`` = [V_0, ..., V_{K+1}] (V_0 the value before the first token, V_{K+1} the reward).
    Segment j covers tokens [c_{j-1}, c_j); δ_j = V_j − V_{j−1}; A_{K+1} = δ_{K+1},
    A_j = δ_j + λ·A_{j+1}; every token of segment j gets A_j. With λ = 1, A_j = R − V_{j−1};
    with λ = 0, A_j = δ_j. Returns a float32 tensor [T] on ``values``' device. A NaN or
    infinite entry of ``values`` (the last one is the reward) raises ValueError naming ``values``.
    """
    values = check_finite(values.to(torch.float32), "values")
    bounds = torch.as_tensor(list(boundaries), dtype=torch.long, device=values.device)
    if bounds.numel() != values.numel():
        raise ValueError(f"{bounds.numel()} boundaries but {values.numel()} values")
    if bounds.numel() < 2 or int(bounds[0]) != 0 or int(bounds[-1]) != length:
        raise ValueError(f"boundaries must run from 0 to T={length}, got {bounds.tolist()}")
    if bool((bounds[1:] < bounds[:-1]).any()):
        raise ValueError(f"boundaries must be non-decreasing, got {bounds.tolist()}")
    deltas = values[1:] - values[:-1]
    adv = torch.empty_like(deltas)
    running = torch.zeros((), dtype=values.dtype, device=values.device)
    for j in range(deltas.numel() - 1, -1, -1):
        running = deltas[j] + gae_lambda * running
        adv[j] = running
    sizes = bounds[1:] - bounds[:-1]
    return torch.repeat_interleave(adv, sizes)


def points_gae(points: Sequence[Sequence[int]], values: torch.Tensor, group: RolloutGroup,
               gae_lambda: float = 1.0) -> list[torch.Tensor]:
    """Per-token advantages of every rollout of ``group`` from values at its value points:
    ``points[i]``, the states of rollout i whose values the chain reads (0 first, each < T_i),
    and ``values``, their values flat in that order (an estimator's ``value_points`` and its
    ``state_values`` there). :func:`segment_gae` over [*points[i], T_i] with R_i after the
    last; tensors on ``values``' device, an empty one for an empty completion."""
    device, values = values.device, values.cpu()
    out = []
    for cs, r, v in zip(points, group.rollouts, values.split([len(cs) for cs in points])):
        length = len(r.completion_ids)
        if length == 0:
            out.append(torch.zeros(0))
            continue
        chain = torch.cat([v, torch.tensor([float(r.reward)])])
        out.append(segment_gae([*cs, length], chain, length, gae_lambda).to(device))
    return out


def gae_advantages(values: torch.Tensor, reward: float, lam: float) -> torch.Tensor:
    """Per-token GAE(λ) advantages of one completion of T tokens (SPEC §4.5).

    ``values`` = [V_0, ..., V_{T-1}], V_t the value of the state before token t (the prompt
    plus the first t tokens); ``reward`` R arrives after the last token; γ = 1. Then
    δ_t = V_{t+1} − V_t for t < T − 1, δ_{T−1} = R − V_{T−1}, and A_t = Σ_k λ^k δ_{t+k}.
    With λ = 1, A_t = R − V_t; with λ = 0, A_t = δ_t. Returns float32 [T] (empty for T = 0).
    A non-finite value or reward raises ValueError naming ``values``."""
    values = torch.as_tensor(values, dtype=torch.float32).flatten()
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must lie in [0, 1], got {lam}")
    length = values.numel()
    if length == 0:
        return values.new_zeros(0)
    bootstrap = torch.cat([values, values.new_tensor([float(reward)])])
    # one segment per token: segment_gae's boundaries 0, 1, ..., T give token-level GAE
    return segment_gae(range(length + 1), bootstrap, length, lam)


def gae_targets(values: torch.Tensor, reward: float, lam: float) -> torch.Tensor:
    """The critic's regression targets of one completion (SPEC §4.5): the λ-returns
    G_t = A_t + V_t, with A_t of :func:`gae_advantages`. With λ = 1 every target is R (the
    Monte-Carlo return, independent of the values); with λ < 1 the targets bootstrap on the
    critic's own values. Returns float32 [T] (empty for T = 0)."""
    values = torch.as_tensor(values, dtype=torch.float32).flatten()
    advantages = gae_advantages(values, reward, lam)  # checks lam and finiteness
    if lam == 1.0:
        return torch.full_like(values, float(reward))  # exactly R, not (R − V_t) + V_t rounded
    return advantages + values
