"""Public data types that cross module lines (SPEC §3): Rollout, RolloutGroup, State."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

__all__ = ["Rollout", "RolloutGroup", "State"]


@dataclass
class Rollout:
    """One sampled completion of a prompt.

    ``offsets[k]`` is the (start, end) character span of completion token k inside
    ``completion_text``; ``hidden`` holds one layer's hidden states for prompt + completion
    tokens, shape ``[len(prompt_ids) + len(completion_ids), H]``; ``logprobs`` and
    ``entropies`` are per completion token under the sampling (old) policy. ``reward`` must be
    finite (a NaN or infinite reward raises ValueError: it would poison every advantage of the
    group).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    reward: float = 0.0
    completion_text: str = ""
    offsets: Optional[list[tuple[int, int]]] = None
    hidden: Optional[torch.Tensor] = None
    prompt_text: str = ""
    logprobs: Optional[list[float]] = None
    entropies: Optional[list[float]] = None

    def __post_init__(self) -> None:
        self.prompt_ids = [int(i) for i in self.prompt_ids]
        self.completion_ids = [int(i) for i in self.completion_ids]
        self.reward = float(self.reward)
        if not math.isfinite(self.reward):
            raise ValueError(f"Rollout.reward is {self.reward}; rewards must be finite")
        n = len(self.completion_ids)
        for name in ("offsets", "logprobs", "entropies"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(
                    f"Rollout.{name} has {len(value)} entries but the completion has {n} tokens"
                )
        if self.offsets is not None:
            self.offsets = [(int(a), int(b)) for a, b in self.offsets]
        if self.hidden is not None:
            expected = len(self.prompt_ids) + n
            if self.hidden.dim() != 2 or self.hidden.shape[0] != expected:
                raise ValueError(
                    f"Rollout.hidden has shape {tuple(self.hidden.shape)}; expected "
                    f"[{expected}, H] (prompt {len(self.prompt_ids)} + completion {n} tokens)"
                )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of this rollout (hidden states are not serialised)."""
        out: dict[str, Any] = {
            "prompt_text": self.prompt_text,
            "prompt_ids": self.prompt_ids,
            "completion_text": self.completion_text,
            "completion_ids": self.completion_ids,
            "reward": self.reward,
        }
        for name in ("offsets", "logprobs", "entropies"):
            value = getattr(self, name)
            if value is not None:
                out[name] = [list(v) for v in value] if name == "offsets" else list(value)
        return out


@dataclass
class RolloutGroup:
    """The rollouts of one prompt, with the prompt id and problem metadata."""

    rollouts: list[Rollout]
    prompt_id: str = ""
    problem: Optional[dict[str, Any]] = None
    #: Monte-Carlo continuation rewards sampled from states, keyed by (rollout index, t)
    continuations: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    #: Each rollout's :meth:`hista.estimators.base.Estimator.represent`, computed where the rollout
    #: lay (training with groups split over processes); an estimator that has
    #: ``represent`` reads these instead of ``Rollout.hidden``. None: not precomputed.
    representations: Optional[list[torch.Tensor]] = None

    def __len__(self) -> int:
        return len(self.rollouts)

    @property
    def rewards(self) -> torch.Tensor:
        """Final rewards of the group as a float tensor [G]."""
        return torch.tensor([r.reward for r in self.rollouts], dtype=torch.float32)


@dataclass
class State:
    """A state s_{i,t} (SPEC §2-3): the prompt plus the first ``t`` completion tokens of
    rollout ``rollout`` in a group (0 <= t <= T). For external prefixes (benchmark queries),
    ``prefix`` carries a Rollout whose completion is the prefix (with its hidden states), and
    ``rollout`` may be None. ``continuations`` holds rewards of continuations sampled from the
    state, for the Monte-Carlo estimator."""

    rollout: Optional[int] = None
    t: int = 0
    prefix: Optional[Rollout] = field(default=None, repr=False)
    continuations: Optional[list[float]] = None
