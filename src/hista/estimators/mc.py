"""Monte-Carlo state values (SPEC §4.4): the SVEB target and the MCS@n rows."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import torch

from ..types import RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig
from .gae import segment_gae


@dataclasses.dataclass
class MCConfig(EstimatorConfig):
    """``num``: use only the first ``num`` continuation rewards of a state (None: all)."""

    num: Optional[int] = None

    def __post_init__(self) -> None:
        if self.num is not None and (isinstance(self.num, bool) or not isinstance(self.num, int) or self.num < 1):
            raise ValueError(f"num must be a positive integer or None, got {self.num!r}")


@register("mc")
class MonteCarlo(Estimator):
    """V(s) = mean reward of continuations sampled from s. Continuations arrive with the
    query (``State.continuations``) or in ``RolloutGroup.continuations[(i, t)]`` (SPEC §4.4)."""

    label = "MC"
    config_class = MCConfig
    needs_continuations = True

    def _mean(self, rewards: Sequence[float], where: str) -> float:
        rewards = list(rewards)[: self.config.num]
        if not rewards:
            raise ValueError(f"Monte Carlo needs at least one continuation reward at {where}")
        if not all(math.isfinite(float(r)) for r in rewards):
            raise ValueError(f"continuation rewards at {where} hold a non-finite value {rewards}; "
                             "rewards must be finite")
        return sum(float(r) for r in rewards) / len(rewards)

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """Mean continuation reward at each state."""
        values = []
        for k, s in enumerate(states):
            rewards = s.continuations if s.continuations is not None else group.continuations.get((s.rollout, s.t))
            if rewards is None:
                raise ValueError(f"states[{k}] (rollout {s.rollout}, t {s.t}) has no continuation rewards")
            values.append(self._mean(rewards, f"states[{k}]"))
        return torch.tensor(values, dtype=torch.float32)

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """GAE over the states of each rollout that have continuations: V(0) is their value at
        t = 0 when sampled, else the group mean; V(T) = R_i."""
        mean = float(group.rewards.mean())
        out = []
        for i, r in enumerate(group.rollouts):
            T = len(r.completion_ids)
            inner = sorted(t for (j, t) in group.continuations if j == i and 0 < t < T)
            start = group.continuations.get((i, 0))
            values = [self._mean(start, f"({i}, 0)") if start else mean]
            values += [self._mean(group.continuations[(i, t)], f"({i}, {t})") for t in inner]
            values.append(r.reward)
            out.append(segment_gae([0, *inner, T], torch.tensor(values), T, gae_lambda))
        return out
