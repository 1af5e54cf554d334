"""Policy losses for RLVR fine-tuning (SPEC §5), registered by name.

    from hista.losses import policy_loss
    loss, metrics = policy_loss("dapo", logp, old_logp, advantages, mask)
    loss.backward()

Every loss works on per-token tensors of shape [B, T] (completion tokens, right-padded,
``mask`` marks the real ones). ``logp`` carries the gradient; ``old_logp``, ``advantages``,
``entropies`` and ``ref_logp`` are treated as constants. A loss function below turns the
batch into a per-token loss ``L_t`` and an importance weight ``w_t``; :func:`policy_loss`
adds the optional KL term, aggregates and computes the metrics. See docs/losses.md.
"""

from __future__ import annotations

import inspect
from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F

Tensor = torch.Tensor

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "constant")
TRACES = ("recency", "uniform")


# --------------------------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Losses: each returns the per-token loss, the importance weight and the clipped-token masks
# --------------------------------------------------------------------------------------------


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


def grpo(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.2) -> LossOut:
    """GRPO (SPEC §5): token ratio ``w_t = exp(log ρ_t)`` in the clipped surrogate."""
    return clipped_surrogate(torch.exp(b.log_ratio), b.adv, eps_low, eps_high)


def dapo(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.28) -> LossOut:
    """DAPO (SPEC §5): GRPO with clip-higher (ε_high 0.28), aggregated by token-mean."""
    return clipped_surrogate(torch.exp(b.log_ratio), b.adv, eps_low, eps_high)


def dr_grpo(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.2) -> LossOut:
    """Dr. GRPO (SPEC §5): GRPO aggregated with the constant normaliser B · max_len."""
    return clipped_surrogate(torch.exp(b.log_ratio), b.adv, eps_low, eps_high)


def _sequence_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over each row's valid tokens, [B, 1] (0 for an empty row)."""
    m = mask.to(x.dtype)
    return (x * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)


def gspo(b: Batch, *, eps_low: float = 3e-4, eps_high: float = 4e-4) -> LossOut:
    """GSPO (SPEC §5): sequence ratio ``w_i = exp(mean_t log ρ_{i,t})`` broadcast to every
    token of the sequence, in the clipped surrogate."""
    w = torch.exp(_sequence_mean(b.log_ratio, b.mask)).expand_as(b.log_ratio)
    return clipped_surrogate(w, b.adv, eps_low, eps_high)


def cispo(b: Batch, *, cap: float = 5.0) -> LossOut:
    """CISPO (SPEC §5): ``L_t = −sg(min(ρ_t, cap)) · A_t · log π_θ(a_t)``; no lower clip."""
    ratio = torch.exp(b.log_ratio)
    loss = -torch.clamp(ratio, max=cap).detach() * b.adv * b.logp
    high = (ratio > cap) & (b.adv > 0)
    return LossOut(loss, ratio, torch.zeros_like(high), high, {})


def ptrace(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.28, lam: float = 0.9,
           trace: str = "recency") -> LossOut:
    """P-trace (SPEC §5): ``w_t = exp(z_t)``, z the λ-discounted, normalised trace of the
    log-ratios over the valid tokens up to t (``trace="recency"``), or their plain mean over
    the whole sequence (``trace="uniform"``, which equals GSPO), in the clipped surrogate."""
    if trace == "recency":
        z = trace_log_ratio(b.log_ratio, b.mask, lam)
    elif trace == "uniform":
        z = _sequence_mean(b.log_ratio, b.mask).expand_as(b.log_ratio)
    else:
        raise ValueError(f"unknown trace {trace!r} for loss 'ptrace'; valid: {', '.join(TRACES)}")
    return clipped_surrogate(torch.exp(z), b.adv, eps_low, eps_high)


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


def strace(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.28, lam: float = 0.9,
           top_entropy_fraction: float = 0.2) -> LossOut:
    """S-trace (SPEC §5): P-trace where only the top-``top_entropy_fraction`` entropy tokens
    of the batch enter the trace (the current token always does); the loss applies to
    every valid token."""
    sel = high_entropy_tokens(b.entropies, b.mask, top_entropy_fraction)
    z = trace_log_ratio(b.log_ratio, b.mask, lam, sel)
    out = clipped_surrogate(torch.exp(z), b.adv, eps_low, eps_high)
    kept = float(sel.sum()) / max(float(b.mask.sum()), 1.0)
    return out._replace(extra={"kept_frac": kept})


def grpo_lambda(b: Batch, *, eps_low: float = 0.2, eps_high: float = 0.28, lam: float = 0.9,
                gamma: float = 1.0) -> LossOut:
    """GRPO-λ (SPEC §5): ``w_t = exp(Σ_{k≤t} (γλ)^(t−k) log ρ_k)`` (unnormalised trace) in the
    clipped surrogate."""
    return clipped_surrogate(torch.exp(discounted_cumsum(b.log_ratio, gamma * lam)), b.adv, eps_low, eps_high)


class LossSpec(NamedTuple):
    """A registered loss (SPEC §5): its function and default aggregation."""

    fn: Callable[..., LossOut]
    aggregation: str


LOSSES: dict[str, LossSpec] = {
    "grpo": LossSpec(grpo, "seq-mean-token-mean"),
    "dapo": LossSpec(dapo, "token-mean"),
    "dr_grpo": LossSpec(dr_grpo, "constant"),
    "gspo": LossSpec(gspo, "seq-mean-token-mean"),
    "cispo": LossSpec(cispo, "token-mean"),
    "ptrace": LossSpec(ptrace, "token-mean"),
    "strace": LossSpec(strace, "token-mean"),
    "grpo_lambda": LossSpec(grpo_lambda, "token-mean"),
}


# --------------------------------------------------------------------------------------------
# Aggregation, KL and the dispatcher
# --------------------------------------------------------------------------------------------


def aggregate(per_token: Tensor, mask: Tensor, aggregation: str, max_len: Optional[int] = None) -> Tensor:
    """Reduce a per-token loss to a scalar over the valid tokens (SPEC §5): ``token-mean``
    = Σ L·m / max(Σ m, 1); ``seq-mean-token-mean`` = mean over all B rows of
    Σ_t L·m / max(Σ_t m, 1); ``constant`` = Σ L·m / (B · max_len), max_len defaulting to T."""
    mask = mask.bool()
    masked = torch.where(mask, per_token, torch.zeros_like(per_token))
    m = mask.to(per_token.dtype)
    if aggregation == "token-mean":
        return masked.sum() / m.sum().clamp(min=1.0)
    if aggregation == "seq-mean-token-mean":
        return (masked.sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if aggregation == "constant":
        length = mask.size(1) if max_len is None else max_len
        return masked.sum() / (mask.size(0) * length)
    raise ValueError(f"unknown aggregation {aggregation!r}; valid: {', '.join(AGGREGATIONS)}")


def k3_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """Per-token KL estimate to the reference policy, TRL's k3 (SPEC §5):
    ``exp(ref − logp) − (ref − logp) − 1``, 0 on padding."""
    diff = torch.where(mask.bool(), ref_logp - logp, torch.zeros_like(logp))
    return torch.exp(diff) - diff - 1.0


def _masked_stats(x: Tensor, mask: Tensor) -> tuple[float, float, float]:
    values = x.detach()[mask]
    if values.numel() == 0:
        return 0.0, 0.0, 0.0
    values = values.to(torch.float64)
    return float(values.mean()), float(values.min()), float(values.max())


def _check_shape(name: str, t: Tensor, shape: torch.Size) -> None:
    if not isinstance(t, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.shape != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)} (the shape of logp)")


def _check_range(loss: str, key: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{key}={value} out of range [{lo}, {hi}] for loss {loss!r}")


def names() -> list[str]:
    """Names of the registered policy losses (SPEC §5)."""
    return sorted(LOSSES)


def default_config(name: str) -> dict:
    """The default keyword configuration of loss ``name``, aggregation included (SPEC §5)."""
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; valid: {', '.join(names())}")
    spec = LOSSES[name]
    params = inspect.signature(spec.fn).parameters
    own = {k: p.default for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return {**own, "aggregation": spec.aggregation}


def check_config(name: str, cfg: dict) -> dict:
    """Validate the keyword configuration of loss ``name`` (names and ranges) and return it
    completed with the defaults; raises ValueError naming the bad key (SPEC §5)."""
    cfg = dict(cfg)
    own = default_config(name)
    own.pop("aggregation")
    common = {"aggregation", "max_len", "beta", "ref_logp", "token_weights"}
    unknown = sorted(set(cfg) - set(own) - common)
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for loss {name!r}; "
                         f"valid: {', '.join(sorted((set(own) | common) - {'ref_logp', 'token_weights'}))}")
    aggregation = cfg.get("aggregation", LOSSES[name].aggregation)
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r} for loss {name!r}; valid: {', '.join(AGGREGATIONS)}")
    max_len = cfg.get("max_len")
    if max_len is not None:
        if aggregation != "constant":
            raise ValueError(f"max_len only applies to aggregation='constant' (loss {name!r} uses {aggregation!r})")
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
    beta = float(cfg.get("beta", 0.0))
    if beta < 0.0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    options = {**own, **cfg}
    for key in ("eps_low", "eps_high"):
        if key in options:
            _check_range(name, key, options[key], 0.0, float("inf"))
    for key in ("lam", "gamma", "top_entropy_fraction"):
        if key in options:
            _check_range(name, key, options[key], 0.0, 1.0)
    if "cap" in options and not options["cap"] > 0:
        raise ValueError(f"cap must be > 0 for loss 'cispo', got {options['cap']}")
    return {**options, "aggregation": aggregation, "beta": beta}


def policy_loss(name: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                entropies: Optional[Tensor] = None, **cfg) -> tuple[Tensor, dict[str, float]]:
    """Scalar policy loss ``name`` and its metrics (SPEC §5).

    ``logp``, ``old_logp``, ``mask`` (0/1 or bool, completion tokens, right-padded) are
    [B, T]; ``advantages`` is [B, T], [B] or [B, 1]; ``entropies`` [B, T] is needed by
    ``strace``. Only ``logp`` receives gradient. Keyword configuration (defaults per loss,
    see docs/losses.md): ``eps_low``, ``eps_high``, ``cap`` (cispo), ``lam``, ``gamma``
    (grpo_lambda), ``trace`` (ptrace), ``top_entropy_fraction`` (strace), ``aggregation``,
    ``max_len`` (constant aggregation), ``beta`` with ``ref_logp`` (k3 KL added per token),
    ``token_weights`` ([B, T] or [B, 1], multiplies the per-token policy loss before the KL term).
    An unknown name or keyword raises ValueError. Metrics are python floats over the valid
    tokens: clip_frac_low, clip_frac_high, ratio_mean/min/max, kept_frac (strace), kl
    (beta != 0).
    """
    cfg = check_config(name, cfg)
    spec = LOSSES[name]
    aggregation, max_len, beta = cfg.pop("aggregation"), cfg.pop("max_len", None), cfg.pop("beta")
    ref_logp, token_weights = cfg.pop("ref_logp", None), cfg.pop("token_weights", None)
    if beta != 0.0 and ref_logp is None:
        raise ValueError(f"beta={beta} needs ref_logp (reference-policy log-probs) for loss {name!r}")

    # Shapes, dtypes, constants.
    if not isinstance(logp, Tensor) or logp.dim() != 2:
        raise ValueError(f"logp must be a [B, T] tensor, got shape {tuple(getattr(logp, 'shape', ()))}")
    if logp.size(0) < 1 or logp.size(1) < 1:
        raise ValueError(f"logp must have B >= 1 and T >= 1, got shape {tuple(logp.shape)}")
    shape = logp.shape
    _check_shape("old_logp", old_logp, shape)
    _check_shape("mask", mask, shape)
    if not isinstance(advantages, Tensor):
        raise ValueError(f"advantages must be a torch.Tensor, got {type(advantages).__name__}")
    if advantages.shape in ((shape[0],), (shape[0], 1)):
        advantages = advantages.reshape(shape[0], 1)
    elif advantages.shape != shape:
        raise ValueError(f"advantages has shape {tuple(advantages.shape)}, expected {tuple(shape)}, "
                         f"({shape[0]},) or ({shape[0]}, 1)")
    if name == "strace":
        if entropies is None:
            raise ValueError("loss 'strace' needs entropies (per-token entropy of the old policy, [B, T])")
    if entropies is not None:
        _check_shape("entropies", entropies, shape)
    if ref_logp is not None:
        _check_shape("ref_logp", ref_logp, shape)
    if token_weights is not None and token_weights.shape not in (shape, (shape[0], 1)):
        raise ValueError(f"token_weights has shape {tuple(token_weights.shape)}, expected {tuple(shape)} or "
                         f"({shape[0]}, 1)")

    mask = mask.bool()
    adv = advantages.detach().to(logp.dtype).expand(shape)
    log_ratio = torch.where(mask, logp - old_logp.detach().to(logp.dtype), torch.zeros_like(logp))
    batch = Batch(logp, log_ratio, adv, mask, None if entropies is None else entropies.detach())

    out = spec.fn(batch, **cfg)
    per_token = out.loss
    if token_weights is not None:  # e.g. TRL's vLLM importance-sampling correction
        per_token = per_token * token_weights.detach().to(per_token.dtype)
    kl = None
    if beta != 0.0:
        kl = k3_kl(logp, ref_logp.detach().to(logp.dtype), mask)
        per_token = per_token + beta * kl
    loss = aggregate(per_token, mask, aggregation, max_len)

    with torch.no_grad():
        n_valid = max(float(mask.sum()), 1.0)
        mean, lo, hi = _masked_stats(out.ratio, mask)
        metrics = {
            "clip_frac_low": float((out.clipped_low & mask).sum()) / n_valid,
            "clip_frac_high": float((out.clipped_high & mask).sum()) / n_valid,
            "ratio_mean": mean,
            "ratio_min": lo,
            "ratio_max": hi,
            **out.extra,
        }
        if kl is not None:
            metrics["kl"] = float(torch.where(mask, kl, torch.zeros_like(kl)).sum()) / n_valid
    return loss, metrics


__all__ = [
    "AGGREGATIONS",
    "LOSSES",
    "aggregate",
    "check_config",
    "default_config",
    "clipped_surrogate",
    "discounted_cumsum",
    "high_entropy_tokens",
    "k3_kl",
    "names",
    "policy_loss",
    "trace_log_ratio",
]
