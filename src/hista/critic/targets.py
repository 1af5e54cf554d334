"""GAE(λ) regression targets of the PPO critic (SPEC §4.5; paper §3.2): the reward comes only
at the last token and γ = 1. Pure tensor math: no model, no I/O."""

from __future__ import annotations

import torch

from ..estimators.gae import segment_gae


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
