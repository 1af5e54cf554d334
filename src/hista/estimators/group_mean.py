"""Group mean baseline, GRPO (SPEC §4.1)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from ..types import RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig, check_finite


@dataclasses.dataclass
class GroupMeanConfig(EstimatorConfig):
    """``leave_one_out``: rollout i's baseline is the mean of the *other* rewards.
    ``length_weighted``: OPO's baseline Σ_j T_j R_j / Σ_j T_j."""

    leave_one_out: bool = False
    length_weighted: bool = False


@register("grpo")
class GroupMean(Estimator):
    """V(s) = the group's mean reward for every state; A_{i,t} = R_i − V, broadcast to every
    token of rollout i, then scaled (SPEC §4.1)."""

    label = "GRPO"
    config_class = GroupMeanConfig

    def baselines(self, group: RolloutGroup) -> torch.Tensor:
        """The baseline b_i of every rollout [G] (SPEC §4.1); a non-finite reward raises
        ValueError naming ``rewards``."""
        rewards = check_finite(group.rewards, "rewards")
        weights = torch.ones_like(rewards)
        if self.config.length_weighted:
            weights = torch.tensor([float(len(r.completion_ids)) for r in group.rollouts])
            if float(weights.sum()) == 0:
                weights = torch.ones_like(rewards)
        total, mass = (weights * rewards).sum(), weights.sum()
        if not self.config.leave_one_out:
            return (total / mass).expand(len(rewards)).clone()
        others = mass - weights
        loo = (total - weights * rewards) / others.clamp_min(1e-12)
        # a rollout with no other (weighted) rollout keeps its own reward: advantage 0
        return torch.where(others > 0, loo, rewards)

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        base = self.baselines(group)
        return [torch.full((len(r.completion_ids),), float(r.reward - base[i])) for i, r in enumerate(group.rollouts)]

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """The baseline of the state's rollout (the plain group mean for external prefixes)."""
        if len(group.rollouts) == 0:
            return torch.full((len(states),), float("nan"))
        base = self.baselines(group)
        mean = float(group.rewards.mean())
        return torch.tensor([float(base[s.rollout]) if s.rollout is not None else mean for s in states])
