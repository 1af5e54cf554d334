"""The GRPO family of policy losses (SPEC §5): GRPO, DAPO, Dr. GRPO, GSPO and CISPO."""

from __future__ import annotations

import torch

from . import register
from .base import Batch, LossOut, clipped_surrogate, sequence_mean


@register("grpo", aggregation="seq-mean-token-mean")
def grpo(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.2) -> LossOut:
    """GRPO (SPEC §5): token ratio ``w_t = exp(log ρ_t)`` in the clipped surrogate."""
    return clipped_surrogate(torch.exp(b.log_ratio), b.adv, eps_low, eps_high)


@register("dapo", aggregation="token-mean")
def dapo(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.28) -> LossOut:
    """DAPO (SPEC §5): GRPO with clip-higher (ε_high 0.28), aggregated by token-mean."""
    return clipped_surrogate(torch.exp(b.log_ratio), b.adv, eps_low, eps_high)


@register("dr_grpo", aggregation="constant", advantage_scale="none")
def dr_grpo(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.2) -> LossOut:
    """Dr. GRPO (SPEC §5): GRPO with unscaled advantages, aggregated with the constant
    normaliser B · max_len."""
    return clipped_surrogate(torch.exp(b.log_ratio), b.adv, eps_low, eps_high)


@register("gspo", aggregation="seq-mean-token-mean")
def gspo(b: Batch, *, eps_low: float = 3e-4, eps_high: float = 4e-4) -> LossOut:
    """GSPO (SPEC §5): sequence ratio ``w_i = exp(mean_t log ρ_{i,t})`` broadcast to every
    token of the sequence, in the clipped surrogate."""
    w = torch.exp(sequence_mean(b.log_ratio, b.mask)).expand_as(b.log_ratio)
    return clipped_surrogate(w, b.adv, eps_low, eps_high)


@register("cispo", aggregation="token-mean")
def cispo(b: Batch, *, cap: float = 5.0) -> LossOut:
    """CISPO (SPEC §5): ``L_t = −sg(min(ρ_t, cap)) · A_t · log π_θ(a_t)``; no lower clip."""
    ratio = torch.exp(b.log_ratio)
    loss = -torch.clamp(ratio, max=cap).detach() * b.adv * b.logp
    high = (ratio > cap) & (b.adv > 0)
    return LossOut(loss, ratio, torch.zeros_like(high), high, {})
