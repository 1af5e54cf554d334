"""State-value and token-advantage estimators (SPEC §4), registered by name.

    from hista.estimators import get
    est = get("hista", profile="default", alpha=0.7)
    adv = est.token_advantages(group, gae_lambda=1.0, scale="group")
    val = est.state_values(group, [State(rollout=0, t=10)])
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .base import Estimator, EstimatorConfig, scale_advantages
from .gae import segment_gae

_REGISTRY: dict[str, Callable[..., Estimator]] = {}


def register(name: str) -> Callable:
    """Class decorator registering an estimator factory under ``name`` (like verl's
    ``register_adv_est``)."""

    def wrap(factory):
        _REGISTRY[name] = factory
        return factory

    return wrap


def names() -> list[str]:
    """Names of the registered estimators."""
    _load_builtin()
    return sorted(_REGISTRY)


def get(name: str, **config: Any) -> Estimator:
    """Build the estimator ``name`` (``grpo``, ``numca``, ``hista``, ``mc``) with keyword
    configuration (SPEC §3-4). Unknown names or keywords raise a ValueError listing the valid
    ones."""
    _load_builtin()
    if name not in _REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; valid: {', '.join(sorted(_REGISTRY))}")
    factory = _REGISTRY[name]
    config_class = getattr(factory, "config_class", None)
    if config_class is not None and dataclasses.is_dataclass(config_class):
        valid = {f.name for f in dataclasses.fields(config_class)} | {"profile"}
        unknown = sorted(set(config) - valid)
        if unknown:
            raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for estimator {name!r}; "
                             f"valid: {', '.join(sorted(valid))}")
    return factory(**config)


def _load_builtin() -> None:
    # Import the estimator modules for their @register side effect.
    from . import group_mean, hista, mc, numca  # noqa: F401


__all__ = ["Estimator", "EstimatorConfig", "get", "names", "register", "scale_advantages", "segment_gae"]
