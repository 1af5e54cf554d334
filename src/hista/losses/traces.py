"""Eligibility traces of log-ratios (SPEC §5: ptrace, strace, grpo_lambda): a discounted running
sum without a [T, T] matrix, the normalised trace, and the high-entropy token selection."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def discounted_cumsum(x: Tensor, decay: float, block: int = 128) -> Tensor:
    """Discounted running sum along the last dim: ``y_t = Σ_{k≤t} decay^(t−k) · x_k``
    (SPEC §5, the traces of ptrace / strace / grpo_lambda), with ``0^0 = 1``.

    Computed as a chunked scan, differentiable and without a [T, T] matrix: the last dim is
    cut into blocks of ``block`` tokens; inside a block the sum is one matmul with the
    [C, C] lower-triangular matrix ``L[j, k] = decay^(j−k)``; the running sum carried into
    each block (the true value at the end of the previous block) is itself a discounted
    cumsum of the block totals with decay ``decay^C``, solved the same way. Cost
    O(numel · C).
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    T = x.shape[-1]
    if T == 0:
        return x
    C = min(block, T)
    nb = -(-T // C)
    pad = nb * C - T
    xb = F.pad(x, (0, pad)).reshape(*x.shape[:-1], nb, C)

    j = torch.arange(C, device=x.device)
    exponent = (j[:, None] - j[None, :]).to(x.dtype)
    base = torch.tensor(float(decay), dtype=x.dtype, device=x.device)
    lower = torch.where(j[:, None] >= j[None, :], base.pow(exponent.clamp(min=0)), 0.0)
    local = xb @ lower.T  # local[..., b, j] = Σ_{k≤j in block b} decay^(j−k) x[b, k]

    if nb > 1:
        # Value at the end of each block including everything before it, then shift by one
        # block: the carry that enters block b is the end value of block b−1.
        ends = discounted_cumsum(local[..., -1], float(decay) ** C, block)
        carry = F.pad(ends[..., :-1], (1, 0))
        local = local + carry[..., None] * base.pow((j + 1).to(x.dtype))
    return local.reshape(*x.shape[:-1], nb * C)[..., :T]


def trace_log_ratio(log_ratio: Tensor, mask: Tensor, lam: float, sel: Optional[Tensor] = None) -> Tensor:
    """Normalised eligibility trace of the log-ratios (SPEC §5, ptrace / strace):
    ``z_t = (λ·n_{t−1} + x_t) / (λ·d_{t−1} + 1)`` with ``n_t = Σ_{k≤t} λ^(t−k) sel_k x_k`` and
    ``d_t = Σ_{k≤t} λ^(t−k) sel_k``. Only selected tokens enter the trace, the current token
    always does; ``sel`` defaults to ``mask`` (ptrace). Padded log-ratios are set to 0 first.
    With λ = 0, ``z_t = x_t``.
    """
    mask = mask.bool()
    sel = mask if sel is None else (sel.bool() & mask)
    x = torch.where(mask, log_ratio, torch.zeros_like(log_ratio))
    s = sel.to(x.dtype)
    n = discounted_cumsum(x * s, lam)
    d = discounted_cumsum(s, lam)
    n_prev = F.pad(n[..., :-1], (1, 0))
    d_prev = F.pad(d[..., :-1], (1, 0))
    return (lam * n_prev + x) / (lam * d_prev + 1.0)


def high_entropy_tokens(entropies: Tensor, mask: Tensor, fraction: float) -> Tensor:
    """Valid tokens whose entropy is at or above the (1 − fraction) quantile of the entropies
    of all valid tokens of the batch (linear interpolation), SPEC §5 strace. ``fraction=1``
    selects every valid token, ``fraction=0`` none."""
    mask = mask.bool()
    values = entropies.detach()[mask].to(torch.float64)
    if values.numel() == 0 or fraction <= 0.0:
        return torch.zeros_like(mask)
    values, _ = torch.sort(values)
    pos = (1.0 - fraction) * (values.numel() - 1)
    lo = int(pos)
    hi = min(lo + 1, values.numel() - 1)
    threshold = values[lo] + (pos - lo) * (values[hi] - values[lo])
    return (entropies.detach().to(torch.float64) >= threshold) & mask
