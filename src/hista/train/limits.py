"""What hista's trainer cannot run, in one place that recipe validation and the
trainer both read: TRL options whose effect lives in the loss hista replaces, and estimators
and losses training cannot serve."""

from __future__ import annotations

from typing import Optional

#: TRL options whose effect lives in the ``_compute_loss`` this class replaces; set the
#: equivalent in the recipe's ``loss`` section instead (a flag must never be silently ignored).
UNSUPPORTED = {
    "top_entropy_quantile": (1.0, "use loss.name=strace with top_entropy_fraction"),
    "entropy_coef": (0.0, "no entropy bonus in hista losses"),
    "use_adaptive_entropy": (False, "no entropy bonus in hista losses"),
    "off_policy_mask_threshold": (None, "not supported by hista losses"),
    "delta": (None, "two-sided clipping is not supported by hista losses"),
}


def untrainable(estimator, loss) -> Optional[tuple[str, str]]:
    """Why training cannot run this estimator and loss, as (recipe field, message),
    from what they declare: an estimator that needs Monte-Carlo continuations or a learned model
    other than a critic trained alongside the policy (the PPO baseline's), a loss that needs
    reference log-probs without a KL term (TRL computes them only when beta > 0). None when it
    can."""
    from ..estimators import refusal

    what = refusal("training", estimator)
    if what is not None:
        return "advantage_estimator.name", f"estimator {estimator.name!r} needs {what}, which training does not provide"
    if loss.needs_ref_logp and loss.config["beta"] == 0.0:
        return "loss.beta", f"loss {loss.name!r} needs reference log-probs, which TRL computes only when beta > 0"
    return None
