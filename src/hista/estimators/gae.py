"""GAE over segments (SPEC §4.2 step 'A_k = δ_k + λ A_{k+1}', §4.3 step 6)."""

from __future__ import annotations

from typing import Sequence

import torch

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
