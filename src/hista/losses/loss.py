"""The :class:`Loss` every registered policy loss is called through (SPEC §5): the checks of
its configuration and inputs (shapes, a 0/1 mask, finite values at valid tokens), the optional
k3 KL term and token weights, the aggregation of the per-token loss and the metrics. The loss
functions themselves (:mod:`hista.losses.clipped`, :mod:`hista.losses.eligibility`) only turn a
checked :class:`~hista.losses.base.Batch` into a per-token loss and an importance weight."""

from __future__ import annotations

import inspect
from typing import Callable, Optional

import torch

from ..errors import InputError
from .base import Batch, LossOut

Tensor = torch.Tensor

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "constant")
#: keywords every loss accepts besides its own (handled here, not by the loss function)
COMMON = ("aggregation", "max_len", "beta")


def check_mask(mask: Tensor) -> Tensor:
    """The token mask of SPEC §5 as a bool tensor: ``mask`` must be bool or hold only 0 and 1
    (a fractional, negative or NaN entry would otherwise count as a valid token); anything else
    raises ValueError naming ``mask``. Costs one ``.all()`` for a non-bool mask, none for bool."""
    if not isinstance(mask, Tensor):
        raise ValueError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        return mask
    binary = (mask == 0) | (mask == 1)
    if not bool(binary.all()):
        bad = mask[~binary].flatten()[0].item()
        raise ValueError(f"mask must be bool or hold only 0 and 1, got {bad} "
                         f"({int((~binary).sum())} of {mask.numel()} entries are neither)")
    return mask.bool()


def _check_finite(mask: Tensor, tensors: list[tuple[str, Tensor]]) -> None:
    """Raise ValueError naming the first of ``tensors`` (each broadcastable to ``mask``) that
    holds a NaN or an infinite value at a valid token; padding is not read. One
    ``.all()`` for all of them together."""
    finite = torch.ones_like(mask)
    for _, t in tensors:
        finite = finite & torch.isfinite(t)
    if bool((finite | ~mask).all()):
        return
    for name, t in tensors:
        bad = ~torch.isfinite(t) & mask
        if bool(bad.any()):
            where = tuple(int(i) for i in bad.nonzero()[0])
            value = t.expand(mask.shape)[where].item()
            raise ValueError(f"{name} holds {value} at valid token {where} ({int(bad.sum())} non-finite valid "
                             f"tokens); {name} must be finite where mask is 1")


def aggregate(per_token: Tensor, mask: Tensor, aggregation: str, max_len: Optional[int] = None) -> Tensor:
    """Reduce a per-token loss to a scalar over the valid tokens (SPEC §5): ``token-mean``
    = Σ L·m / max(Σ m, 1); ``seq-mean-token-mean`` = mean over all B rows of
    Σ_t L·m / max(Σ_t m, 1); ``constant`` = Σ L·m / (B · max_len), max_len defaulting to T.
    ``mask`` is bool or 0/1 (anything else raises ValueError naming ``mask``)."""
    mask = check_mask(mask)
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
    ``exp(ref − logp) − (ref − logp) − 1``, 0 on padding. ``mask`` is bool or 0/1."""
    diff = torch.where(check_mask(mask), ref_logp - logp, torch.zeros_like(logp))
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


def default_config(fn: Callable) -> dict:
    """The default keyword configuration of the registered loss function ``fn``, aggregation
    included (SPEC §5): its keyword-only parameters with their defaults."""
    params = inspect.signature(fn).parameters
    own = {k: p.default for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return {**own, "aggregation": fn.aggregation}


def check_config(name: str, fn: Callable, cfg: dict) -> dict:
    """Validate the keyword configuration ``cfg`` of the loss ``fn`` registered as ``name``
    (names and ranges) and return it completed with the defaults; raises ValueError naming the
    bad key (SPEC §5)."""
    cfg = dict(cfg)
    own = default_config(fn)
    default_aggregation = own.pop("aggregation")
    unknown = sorted(set(cfg) - set(own) - set(COMMON))
    if unknown:
        raise InputError(f"unknown parameter(s) {', '.join(unknown)} for loss {name!r}; "
                         f"valid: {', '.join(sorted(set(own) | set(COMMON)))}")
    aggregation = cfg.get("aggregation", default_aggregation)
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
        raise ValueError(f"cap must be > 0 for loss {name!r}, got {options['cap']}")
    return {**options, "aggregation": aggregation, "beta": beta}


class Loss:
    """A registered policy loss with its checked configuration (SPEC §5). ``loss(logp, old_logp,
    advantages, mask, entropies=..., ref_logp=..., token_weights=...)`` returns the scalar loss
    and its metrics; ``needs_entropy`` / ``needs_ref_logp`` say which optional inputs it needs
    (``needs_ref_logp`` is also true when the configuration adds a KL term, ``beta`` > 0)."""

    def __init__(self, name: str, fn: Callable, cfg: dict):
        self.name, self.fn = name, fn
        self.config = check_config(name, fn, cfg)
        self.aggregation: str = self.config["aggregation"]
        self.advantage_scale: str = fn.advantage_scale
        self.needs_entropy: bool = fn.needs_entropy
        self.needs_ref_logp: bool = fn.needs_ref_logp or self.config["beta"] != 0.0

    def __repr__(self) -> str:
        return f"Loss({self.name!r}, {self.config})"

    def per_token(self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                  entropies: Optional[Tensor] = None, ref_logp: Optional[Tensor] = None,
                  token_weights: Optional[Tensor] = None) -> tuple[Tensor, Tensor, LossOut, Optional[Tensor]]:
        """The checked inputs' per-token loss [B, T] before aggregation (KL term and token
        weights included), the boolean mask, the loss function's output (ratio, clipping) and
        the per-token KL (None when ``beta`` is 0) (SPEC §5): what :meth:`__call__` aggregates,
        and what another trainer's aggregation (verl's ``agg_loss``) can take instead."""
        name, cfg = self.name, dict(self.config)
        for key in ("aggregation", "max_len"):
            cfg.pop(key, None)
        beta = cfg.pop("beta")
        if self.needs_ref_logp and ref_logp is None:
            why = f"beta={beta}" if beta != 0.0 else "it"
            raise ValueError(f"{why} needs ref_logp (reference-policy log-probs) for loss {name!r}")

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
        if self.needs_entropy and entropies is None:
            raise ValueError(f"loss {name!r} needs entropies (per-token entropy of the old policy, [B, T])")
        if entropies is not None:
            _check_shape("entropies", entropies, shape)
        if ref_logp is not None:
            _check_shape("ref_logp", ref_logp, shape)
        if token_weights is not None and token_weights.shape not in (shape, (shape[0], 1)):
            raise ValueError(f"token_weights has shape {tuple(token_weights.shape)}, expected {tuple(shape)} or "
                             f"({shape[0]}, 1)")

        mask = check_mask(mask)
        adv = advantages.detach().to(logp.dtype).expand(shape)
        inputs = [("advantages", adv), ("old_logp", old_logp.detach())]
        if self.needs_entropy:
            inputs.append(("entropies", entropies.detach()))
        if beta != 0.0:
            inputs.append(("ref_logp", ref_logp.detach()))
        if token_weights is not None:
            inputs.append(("token_weights", token_weights.detach()))
        _check_finite(mask, inputs)
        log_ratio = torch.where(mask, logp - old_logp.detach().to(logp.dtype), torch.zeros_like(logp))
        batch = Batch(logp, log_ratio, adv, mask, None if entropies is None else entropies.detach())

        out = self.fn(batch, **cfg)
        per_token = out.loss
        if token_weights is not None:  # e.g. TRL's vLLM importance-sampling correction
            per_token = per_token * token_weights.detach().to(per_token.dtype)
        kl = None
        if beta != 0.0:
            kl = k3_kl(logp, ref_logp.detach().to(logp.dtype), mask)
            per_token = per_token + beta * kl
        return per_token, mask, out, kl

    def __call__(self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                 entropies: Optional[Tensor] = None, ref_logp: Optional[Tensor] = None,
                 token_weights: Optional[Tensor] = None) -> tuple[Tensor, dict[str, float]]:
        """Scalar loss and metrics (SPEC §5); see :func:`policy_loss` for the arguments."""
        per_token, mask, out, kl = self.per_token(logp, old_logp, advantages, mask, entropies=entropies,
                                                  ref_logp=ref_logp, token_weights=token_weights)
        loss = aggregate(per_token, mask, self.config["aggregation"], self.config.get("max_len"))
        return loss, self.metrics(mask, out, kl)

    @staticmethod
    def metrics(mask: Tensor, out: LossOut, kl: Optional[Tensor] = None) -> dict[str, float]:
        """The loss's metrics over the valid tokens (SPEC §5): clip_frac_low, clip_frac_high,
        ratio_mean/min/max, the loss function's own (kept_frac) and kl when there is a KL term."""
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
        return metrics
