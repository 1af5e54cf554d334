"""Reward verifiers: ``math``, ``choice`` and ``code``, registered by name.

A verifier is a function ``f(completion, answer) -> (reward, reason)`` registered with
``@register(name)`` next to its definition; other packages add theirs through the entry-point
group ``hista.verifiers``. ``verify(kind, completion, answer)`` returns the reward (1.0 or 0.0
for the built-ins); ``verify_with_reason`` also returns a short reason ("correct", "no answer
found", "wrong answer: got 7", "timeout on case 1/3", ...). A verifier never raises on
malformed model output; an unknown ``kind`` is a programming error and raises ``ValueError``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..registry import Registry

__all__ = ["REGISTRY", "Verifier", "get", "names", "register", "verify", "verify_with_reason"]

logger = logging.getLogger(__name__)

Verifier = Callable[[Any, Any], "tuple[float, str]"]

# Defined before any verifier module is imported: the registry imports them on first use, and
# they import ``register`` from here.
REGISTRY = Registry("verifier", __name__, "hista.verifiers")


def register(name: str, *, replace: bool = False) -> Callable[[Verifier], Verifier]:
    """Decorator registering a verifier ``f(completion, answer) -> (reward, reason)`` under
    ``name``. A taken name raises ``ValueError`` unless ``replace=True``."""
    return REGISTRY.register(name, replace=replace)


def names() -> list[str]:
    """Names of the registered verifiers, sorted."""
    return REGISTRY.names()


def get(name: str) -> Verifier:
    """The verifier function registered under ``name``; an InputError (a ValueError)
    listing the valid names if there is none."""
    return REGISTRY.get(name)


def verify_with_reason(kind: str, completion: Any, answer: Any) -> tuple[float, str]:
    """Reward of ``completion`` against the gold ``answer`` under verifier ``kind``, with a
    short reason.  Raises ``ValueError`` for an unknown ``kind`` (listing the valid
    kinds); never raises because of the completion or the answer."""
    fn = get(kind)
    try:
        reward, reason = fn(completion, answer)
        reward, reason = float(reward), str(reason)
    except Exception as exc:  # last-resort guard for registered third-party verifiers
        logger.debug("verifier %r failed", kind, exc_info=True)
        return 0.0, f"verifier error: {type(exc).__name__}"
    if reward != reward:  # NaN
        return 0.0, "verifier returned NaN"
    return reward, reason


def verify(kind: str, completion: Any, answer: Any) -> float:
    """Reward (1.0 or 0.0 for the built-in kinds) of ``completion`` against the gold
    ``answer`` under verifier ``kind``; see ``verify_with_reason``."""
    return verify_with_reason(kind, completion, answer)[0]
