"""What every policy loss of SPEC §5 shares: the validated batch it reads, what it returns
before aggregation, and the PPO clipped surrogate."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

Tensor = torch.Tensor


class Batch(NamedTuple):
    """Validated inputs shared by every loss of SPEC §5: all [B, T] (advantages broadcast),
    only ``logp`` carries gradient, padded log-ratios set to 0."""

    logp: Tensor
    log_ratio: Tensor
    adv: Tensor
    mask: Tensor  # bool
    entropies: Optional[Tensor]


class LossOut(NamedTuple):
    """What a loss of SPEC §5 returns before aggregation: per-token loss, importance weight,
    the clipped-token masks and extra metrics."""

    loss: Tensor  # per-token loss L_t, [B, T]
    ratio: Tensor  # importance weight w_t, [B, T]
    clipped_low: Tensor  # bool [B, T]
    clipped_high: Tensor  # bool [B, T]
    extra: dict  # additional metrics (python floats)


def clipped_surrogate(w: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> LossOut:
    """PPO clipped surrogate per token (SPEC §5): ``L_t = −min(w_t·A_t, clip(w_t, 1−ε_low,
    1+ε_high)·A_t)``, with the clipped-token masks used by the metrics."""
    clipped = torch.clamp(w, 1.0 - eps_low, 1.0 + eps_high)
    loss = -torch.minimum(w * adv, clipped * adv)
    low = (w < 1.0 - eps_low) & (adv < 0)
    high = (w > 1.0 + eps_high) & (adv > 0)
    return LossOut(loss, w, low, high, {})


def sequence_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over each row's valid tokens, [B, 1] (0 for an empty row); SPEC §5 GSPO."""
    m = mask.to(x.dtype)
    return (x * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
