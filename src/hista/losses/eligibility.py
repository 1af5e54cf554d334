"""Eligibility-trace policy losses (SPEC §5): P-trace, S-trace and GRPO-λ. The trace math is in
:mod:`hista.losses.traces`."""

from __future__ import annotations

import torch

from . import register
from .base import Batch, LossOut, clipped_surrogate, sequence_mean
from .traces import discounted_cumsum, high_entropy_tokens, trace_log_ratio

TRACES = ("recency", "uniform")


@register("ptrace", aggregation="token-mean")
def ptrace(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.28, lam: float = 0.9,
           trace: str = "recency") -> LossOut:
    """P-trace (SPEC §5): ``w_t = exp(z_t)``, z the λ-discounted, normalised trace of the
    log-ratios over the valid tokens up to t (``trace="recency"``), or their plain mean over
    the whole sequence (``trace="uniform"``, which equals GSPO), in the clipped surrogate."""
    if trace == "recency":
        z = trace_log_ratio(b.log_ratio, b.mask, lam)
    elif trace == "uniform":
        z = sequence_mean(b.log_ratio, b.mask).expand_as(b.log_ratio)
    else:
        raise ValueError(f"unknown trace {trace!r} for loss 'ptrace'; valid: {', '.join(TRACES)}")
    return clipped_surrogate(torch.exp(z), b.adv, eps_low, eps_high)


@register("strace", aggregation="token-mean", needs_entropy=True)
def strace(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.28, lam: float = 0.9,
           top_entropy_fraction: float = 0.2) -> LossOut:
    """S-trace (SPEC §5): P-trace where only the top-``top_entropy_fraction`` entropy tokens
    of the batch (entropies of the old policy) enter the trace (the current token always
    does); the loss applies to every valid token."""
    sel = high_entropy_tokens(b.entropies, b.mask, top_entropy_fraction)
    z = trace_log_ratio(b.log_ratio, b.mask, lam, sel)
    out = clipped_surrogate(torch.exp(z), b.adv, eps_low, eps_high)
    kept = float(sel.sum()) / max(float(b.mask.sum()), 1.0)
    return out._replace(extra={"kept_frac": kept})


@register("grpo_lambda", aggregation="token-mean")
def grpo_lambda(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.28, lam: float = 0.9,
                gamma: float = 1.0) -> LossOut:
    """GRPO-λ (SPEC §5): ``w_t = exp(Σ_{k≤t} (γλ)^(t−k) log ρ_k)`` (unnormalised trace) in the
    clipped surrogate."""
    return clipped_surrogate(torch.exp(discounted_cumsum(b.log_ratio, gamma * lam)), b.adv, eps_low, eps_high)
