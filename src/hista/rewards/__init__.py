"""Reward verifiers (SPEC §6): ``math``, ``choice`` and ``code``.

``verify(kind, completion, answer)`` returns the reward (1.0 or 0.0);
``verify_with_reason`` also returns a short reason ("correct", "no answer found",
"wrong answer: got 7", "timeout on case 1/3", ...).  A verifier never raises on malformed
model output; an unknown ``kind`` is a programming error and raises ``ValueError``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from .choice import verify_choice
from .code import verify_code
from .math import verify_math

__all__ = ["VERIFIERS", "register_verifier", "verifier_kinds", "verify", "verify_with_reason"]

logger = logging.getLogger(__name__)

Verifier = Callable[[Any, Any], "tuple[float, str]"]

#: kind -> verifier ``f(completion, answer) -> (reward, reason)``.
VERIFIERS: dict[str, Verifier] = {
    "math": verify_math,
    "choice": verify_choice,
    "code": verify_code,
}


def verifier_kinds() -> list[str]:
    """Names of the registered verifier kinds, sorted (SPEC §6)."""
    return sorted(VERIFIERS)


def register_verifier(kind: str, fn: Verifier, *, replace: bool = False) -> None:
    """Register ``fn(completion, answer) -> (reward, reason)`` under ``kind`` (SPEC §6).

    Raises ``ValueError`` if ``kind`` exists and ``replace`` is False.
    """
    if not isinstance(kind, str) or not kind:
        raise ValueError("verifier kind must be a non-empty string")
    if kind in VERIFIERS and not replace:
        raise ValueError(f"verifier kind {kind!r} is already registered")
    VERIFIERS[kind] = fn


def verify_with_reason(kind: str, completion: Any, answer: Any) -> tuple[float, str]:
    """Reward of ``completion`` against the gold ``answer`` under verifier ``kind``, with a
    short reason (SPEC §6).  Raises ``ValueError`` for an unknown ``kind`` (listing the valid
    kinds); never raises because of the completion or the answer."""
    fn = VERIFIERS.get(kind) if isinstance(kind, str) else None
    if fn is None:
        valid = ", ".join(verifier_kinds())
        raise ValueError(f"unknown verifier kind {kind!r}; valid kinds: {valid}")
    try:
        reward, reason = fn(completion, answer)
        reward = float(reward)
    except Exception as exc:  # last-resort guard for registered third-party verifiers
        logger.debug("verifier %r failed", kind, exc_info=True)
        return 0.0, f"verifier error: {type(exc).__name__}"
    if reward != reward:  # NaN
        return 0.0, "verifier returned NaN"
    return reward, str(reason)


def verify(kind: str, completion: Any, answer: Any) -> float:
    """Reward (1.0 or 0.0 for the built-in kinds) of ``completion`` against the gold
    ``answer`` under verifier ``kind`` (SPEC §6); see ``verify_with_reason``."""
    return verify_with_reason(kind, completion, answer)[0]
