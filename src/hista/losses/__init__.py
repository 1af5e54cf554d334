"""Policy losses for RLVR fine-tuning (SPEC §5), registered by name.

    from hista.losses import policy_loss
    loss, metrics = policy_loss("dapo", logp, old_logp, advantages, mask)
    loss.backward()

Every loss works on per-token tensors of shape [B, T] (completion tokens, right-padded,
``mask`` marks the real ones). ``logp`` carries the gradient; ``old_logp``, ``advantages``,
``entropies`` and ``ref_logp`` are treated as constants. A loss is a function registered with
``@register(name, aggregation=...)`` that turns the batch into a per-token loss ``L_t`` and an
importance weight ``w_t`` (:mod:`hista.losses.clipped`, :mod:`hista.losses.eligibility`; other
packages add theirs through the entry-point group ``hista.losses``); :class:`Loss` adds the
optional KL term, aggregates and computes the metrics. What a loss needs from its caller is
declared at registration: ``needs_entropy`` (old-policy entropies), ``needs_ref_logp``
(reference-policy log-probs), and the advantage scaling it expects (``advantage_scale``).
See docs/losses.md.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from ..registry import Registry
from . import loss
from .base import Batch, LossOut, clipped_surrogate
from .loss import AGGREGATIONS, Loss, aggregate, check_config, check_mask, k3_kl
from .traces import discounted_cumsum, high_entropy_tokens, trace_log_ratio

Tensor = torch.Tensor


def _build(fn: Callable, name: str, cfg: dict) -> "Loss":
    return Loss(name, fn, cfg)


def _adopt(name: str, fn: Callable) -> Callable:
    if not hasattr(fn, "aggregation"):
        raise ValueError(f"loss plugin {name!r} names a function without its declarations; decorate it with "
                         f"@hista.losses.register({name!r}, aggregation=...)")
    return register(name, aggregation=fn.aggregation, needs_entropy=fn.needs_entropy,
                    needs_ref_logp=fn.needs_ref_logp, advantage_scale=fn.advantage_scale)(fn)


REGISTRY = Registry("loss", __name__, "hista.losses", _build, _adopt)


def register(name: str, *, aggregation: str, needs_entropy: bool = False, needs_ref_logp: bool = False,
             advantage_scale: str = "group", replace: bool = False) -> Callable[[Callable], Callable]:
    """Decorator registering a loss function ``fn(batch: Batch, *, **params) -> LossOut``
    under ``name`` (like verl's ``register_policy_loss``), with its default ``aggregation``
    and what it needs: ``needs_entropy`` (old-policy entropies [B, T]), ``needs_ref_logp``
    (reference log-probs, whatever ``beta``), and ``advantage_scale`` (the estimator scaling
    it expects by default: "group", or "none" for Dr. GRPO). Its keyword-only parameters, with
    their defaults, are its configuration (SPEC §5). A taken name raises unless
    ``replace=True``."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; valid: {', '.join(AGGREGATIONS)}")

    def wrap(fn: Callable) -> Callable:
        fn.loss_name, fn.aggregation, fn.advantage_scale = name, aggregation, advantage_scale
        fn.needs_entropy, fn.needs_ref_logp = needs_entropy, needs_ref_logp
        return REGISTRY.register(name, fn, replace=replace)

    return wrap


def names() -> list[str]:
    """Names of the registered policy losses (SPEC §5)."""
    return REGISTRY.names()


def lookup(name: str) -> Callable:
    """The registered loss function ``name`` with its declared attributes (``aggregation``,
    ``needs_entropy``, ``needs_ref_logp``, ``advantage_scale``); SPEC §5."""
    return REGISTRY.lookup(name)


def get(name: str, **cfg) -> "Loss":
    """The loss ``name`` with keyword configuration ``cfg`` checked and completed with its
    defaults (SPEC §5): call it on [B, T] tensors."""
    return REGISTRY.get(name, **cfg)


def default_config(name: str) -> dict:
    """The default keyword configuration of loss ``name``, aggregation included (SPEC §5)."""
    return loss.default_config(lookup(name))


def policy_loss(name: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                entropies: Optional[Tensor] = None, ref_logp: Optional[Tensor] = None,
                token_weights: Optional[Tensor] = None, **cfg) -> tuple[Tensor, dict[str, float]]:
    """Scalar policy loss ``name`` and its metrics (SPEC §5): ``get(name, **cfg)(...)``.

    ``logp``, ``old_logp``, ``mask`` (0/1 or bool, completion tokens, right-padded) are
    [B, T]; ``advantages`` is [B, T], [B] or [B, 1]; ``entropies`` [B, T] is needed by losses
    declared with ``needs_entropy`` (``strace``). Only ``logp`` receives gradient. Keyword
    configuration (defaults per loss, see docs/losses.md): ``eps_low``, ``eps_high``, ``cap``
    (cispo), ``lam``, ``gamma`` (grpo_lambda), ``trace`` (ptrace), ``top_entropy_fraction``
    (strace), ``aggregation``, ``max_len`` (constant aggregation), ``beta`` with ``ref_logp``
    (k3 KL added per token), ``token_weights`` ([B, T] or [B, 1], multiplies the per-token
    policy loss before the KL term). An unknown name or keyword raises a ValueError, and so do
    a ``mask`` that is not bool or 0/1 and a NaN or infinite value of ``advantages``,
    ``old_logp``, ``entropies`` (when the loss needs them), ``ref_logp`` (when ``beta`` != 0) or
    ``token_weights`` at a valid token, naming the argument. Metrics are
    python floats over the valid tokens: clip_frac_low, clip_frac_high, ratio_mean/min/max,
    kept_frac (strace), kl (beta != 0).
    """
    return get(name, **cfg)(logp, old_logp, advantages, mask, entropies=entropies, ref_logp=ref_logp,
                            token_weights=token_weights)


__all__ = [
    "AGGREGATIONS",
    "Batch",
    "Loss",
    "LossOut",
    "aggregate",
    "check_config",
    "check_mask",
    "clipped_surrogate",
    "default_config",
    "discounted_cumsum",
    "get",
    "high_entropy_tokens",
    "k3_kl",
    "lookup",
    "names",
    "policy_loss",
    "register",
    "trace_log_ratio",
]
