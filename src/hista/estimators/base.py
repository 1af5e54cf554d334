"""The estimator protocol, configuration and advantage scaling shared by every estimator
(SPEC §3, §4.1)."""

from __future__ import annotations

import abc
import dataclasses
import json
from typing import Any, ClassVar, Optional, Sequence

import torch

from ..types import RolloutGroup, State

SCALES = ("group", "batch", "none")
STD_EPS = 1e-4


def group_std(rewards: torch.Tensor) -> torch.Tensor:
    """Unbiased standard deviation of a group's rewards, 0 for a group of fewer than two."""
    if rewards.numel() < 2:
        return torch.zeros((), dtype=torch.float32)
    return rewards.float().std(unbiased=True)


def scale_advantages(
    advantages: list[torch.Tensor], rewards: torch.Tensor, scale: str = "group", batch_std: Optional[float] = None
) -> list[torch.Tensor]:
    """Divide per-token advantages by (std + 1e-4) (SPEC §4.1): the group's reward std
    (``scale="group"``), a std given by the caller for the whole batch (``"batch"``,
    ``batch_std`` required), or leave them unscaled (``"none"``)."""
    if scale == "none":
        return advantages
    if scale == "group":
        std = float(group_std(rewards))
    elif scale == "batch":
        if batch_std is None:
            raise ValueError('scale="batch" needs batch_std (the reward std over the whole batch)')
        std = float(batch_std)
    else:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    return [a / (std + STD_EPS) for a in advantages]


@dataclasses.dataclass
class EstimatorConfig:
    """Base of every estimator's configuration: a dataclass that serialises to JSON."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


class Estimator(abc.ABC):
    """Protocol of SPEC §3: ``token_advantages`` and ``state_values`` on a RolloutGroup.

    Subclasses set ``name`` and ``config_class`` and implement ``_raw_advantages`` (unscaled
    per-token advantages, one tensor [T_i] per rollout) and ``state_values``. Estimators are
    pure: no model calls, deterministic, CPU or CUDA.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type] = EstimatorConfig

    def __init__(self, config: Optional[EstimatorConfig] = None, **overrides: Any):
        config = config or self.config_class()
        self.config = dataclasses.replace(config, **overrides) if overrides else config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"

    def token_advantages(
        self, group: RolloutGroup, *, gae_lambda: float = 1.0, scale: str = "group", batch_std: Optional[float] = None
    ) -> list[torch.Tensor]:
        """Per-token advantages of every rollout of ``group``: a list of float32 tensors,
        ``adv[i].shape == (len(group.rollouts[i].completion_ids),)`` (SPEC §3-4)."""
        if not 0.0 <= gae_lambda <= 1.0:
            raise ValueError(f"gae_lambda must lie in [0, 1], got {gae_lambda}")
        if scale not in SCALES:
            raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
        if len(group.rollouts) == 0:
            return []
        raw = self._raw_advantages(group, gae_lambda)
        return scale_advantages(raw, group.rewards, scale, batch_std)

    @abc.abstractmethod
    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """Unscaled per-token advantages, one float32 tensor [T_i] per rollout."""

    @abc.abstractmethod
    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """V at each state (SPEC §3): a float32 tensor [len(states)]."""

    def to_dict(self) -> dict[str, Any]:
        """The estimator's name and full configuration (recorded in result files)."""
        return {"name": self.name, "config": self.config.to_dict()}
