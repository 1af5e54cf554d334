"""State-value and token-advantage estimators (SPEC §4), registered by name.

    from hista.estimators import get
    est = get("hista", profile="default", alpha=0.7)
    adv = est.token_advantages(group, gae_lambda=1.0, scale="group")
    val = est.state_values(group, [State(rollout=0, t=10)])

An estimator is a class registered with ``@register(name)`` (or ``@register(name,
profile=...)`` for a non-default profile, which lives in its own module); other packages add
theirs through the entry-point group ``hista.estimators``. What an estimator needs from its
caller is declared on the class (``needs_hidden``, ``needs_text``, ``needs_continuations``, and
the protocol it follows: :class:`ReadsCritic`, :class:`LearnsAcrossGroups`), read as one
:class:`Needs` by :func:`needs`; :func:`refusal` says whether a consumer (SVEB, training, the
own-loop API, verl) can serve it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..errors import InputError
from ..registry import Registry
from .base import (
    CONSUMERS,
    Estimator,
    EstimatorConfig,
    Feeds,
    LearnsAcrossGroups,
    Needs,
    ReadsCritic,
    critic_trains_with_policy,
    needs,
    refusal,
    scale_advantages,
)
from .gae import segment_gae

DEFAULT_PROFILE = "default"


def _build(cls: type, name: str, cfg: dict) -> Estimator:
    return cls(**cfg)


REGISTRY = Registry("estimator", __name__, "hista.estimators", _build, adopt=lambda name, cls: register(name)(cls))
#: estimator name -> its profiles (the default first), for those registered with profiles
_PROFILES: dict[str, list[str]] = {}


def register(name: str, *, profile: str = DEFAULT_PROFILE, replace: bool = False) -> Callable[[type], type]:
    """Class decorator registering an estimator under ``name`` (SPEC §3; like verl's
    ``register_adv_est``); ``profile`` registers a non-default profile of ``name``, reached by
    ``get(name, profile=...)``. A taken name (or profile) raises unless ``replace=True``."""

    def wrap(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, Estimator)):
            raise TypeError(f"@register({name!r}) decorates Estimator subclasses, not {cls!r}")
        key = name if profile == DEFAULT_PROFILE else f"{name}-{profile}"
        REGISTRY.register(key, cls, replace=replace)
        cls.name, cls.profile = name, profile
        if profile != DEFAULT_PROFILE:
            known = _PROFILES.setdefault(name, [DEFAULT_PROFILE])
            if profile not in known:  # the default first, then by name (not by import order)
                known[1:] = sorted([*known[1:], profile])
        return cls

    return wrap


def names() -> list[str]:
    """Names of the registered estimators, plugins included (SPEC §3; profiles not listed
    separately)."""
    keys = REGISTRY.names()
    variants = {f"{n}-{p}" for n, ps in _PROFILES.items() for p in ps if p != DEFAULT_PROFILE}
    return [k for k in keys if k not in variants]


def profiles(name: str) -> list[str]:
    """The profiles of estimator ``name`` (SPEC §4.2-4.3 profiles; ``["default"]`` for one
    without other profiles)."""
    REGISTRY.lookup(name)
    return list(_PROFILES.get(name, [DEFAULT_PROFILE]))


def estimator_class(name: str, profile: Optional[str] = None) -> type:
    """The class registered for ``name`` and ``profile`` (None: the default; SPEC §3). An InputError
    names the estimators that have profiles when ``name`` has no such profile."""
    cls = REGISTRY.lookup(name)
    if profile is None or profile == DEFAULT_PROFILE:
        return cls
    if profile not in _PROFILES.get(name, []):
        with_profiles = "; ".join(f"{n} ({', '.join(ps)})" for n, ps in sorted(_PROFILES.items()))
        raise InputError(f"estimator {name!r} has no profile {profile!r}; estimators with profiles: "
                         f"{with_profiles or 'none'}")
    return REGISTRY.lookup(f"{name}-{profile}")


def get(name: str, profile: Optional[str] = None, **config: Any) -> Estimator:
    """Build the estimator ``name`` (``grpo``, ``numca``, ``hista``, ``mc``, or a plugin's) in
    ``profile`` with keyword configuration (SPEC §3-4). Unknown names, profiles or keywords
    raise an InputError (a ValueError) listing the valid ones."""
    return estimator_class(name, profile)(**config)


def from_dict(record: dict) -> Estimator:
    """Rebuild an estimator from :meth:`Estimator.to_dict` (``{"name", "config"}``), as result
    files record it (SPEC §3: a serialisable config records exactly what ran)."""
    if not isinstance(record, dict) or not isinstance(record.get("name"), str):
        raise InputError(f"an estimator record is {{'name': ..., 'config': {{...}}}}, got {record!r}")
    return get(record["name"], **dict(record.get("config") or {}))


__all__ = ["CONSUMERS", "Estimator", "EstimatorConfig", "Feeds", "LearnsAcrossGroups", "Needs", "ReadsCritic",
           "critic_trains_with_policy", "from_dict", "get", "names", "needs", "profiles", "refusal", "register",
           "scale_advantages", "segment_gae"]
