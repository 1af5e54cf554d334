"""Blend: the weighted mean of Hista's and Numca's state values (docs/estimators.md "Blend").

The two estimators know different things about a state: Hista the rewards of rollouts whose
hidden-state prefixes lie near it, Numca the rewards of rollouts that wrote the same
intermediate numbers. On the SVEB study's selection halves their mean was closer to the
Monte-Carlo value than either (results/sveb-study, "Blend"), with no rollout beyond the group.

V(s) = w·V_Hista(s) + (1 − w)·V_Numca(s) at every state. Advantages are GAE over the union of
the two estimators' value points with the blended values there, so that the value/advantage
identity holds (docs/estimators.md): with λ = 1 every token from a point c up to the next gets
R − V(c).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import torch

from ..types import RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig
from .gae import points_gae
from .hista import LAYER_DEPTH, Hista
from .numca import Numca


@dataclasses.dataclass
class BlendConfig(EstimatorConfig):
    """``hista_weight``: w, the weight of Hista's value (Numca's is 1 − w). ``layer``: Hista's
    hidden layer (None: its structure rule's depth)."""

    hista_weight: float = 0.5
    layer: Optional[int] = None

    def check(self) -> None:
        """Raise a ValueError naming an invalid parameter."""
        if not (math.isfinite(self.hista_weight) and 0.0 <= self.hista_weight <= 1.0):
            raise ValueError(f"hista_weight must lie in [0, 1], got {self.hista_weight}")


@register("blend")
class Blend(Estimator):
    """Weighted mean of default Hista's and default Numca's state values; advantages by GAE over
    the union of their value points (docs/estimators.md "Blend")."""

    label = "Blend"
    config_class = BlendConfig
    needs_hidden = True
    needs_text = True
    layer_depth = LAYER_DEPTH

    def __init__(self, config: Optional[BlendConfig] = None, **overrides):
        super().__init__(config, **overrides)
        self.config.check()
        self.hista = Hista(layer=self.config.layer)
        self.numca = Numca()

    def resolved(self, group: RolloutGroup) -> dict:
        """Hista's interval and stride for ``group`` (its structure rule)."""
        return self.hista.resolved(group)

    def value_points(self, group: RolloutGroup) -> list[list[int]]:
        """Per rollout, the union of Hista's nodes and Numca's segment starts (both hold 0)."""
        return [sorted(set(h) | set(n)) for h, n in zip(self.hista.value_points(group),
                                                       self.numca.value_points(group))]

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """w·V_Hista + (1 − w)·V_Numca at each state, float32 on the hidden states' device."""
        hista = self.hista.state_values(group, states)
        numca = self.numca.state_values(group, states).to(hista.device)
        w = self.config.hista_weight
        return w * hista + (1.0 - w) * numca

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """Segment GAE per rollout: boundaries = its value points and T, values = the blended
        values there and the reward R_i."""
        points = self.value_points(group)
        states = [State(rollout=i, t=c) for i, cs in enumerate(points) for c in cs]
        values = self.state_values(group, states) if states else torch.zeros(0)
        return points_gae(points, values, group, gae_lambda)
