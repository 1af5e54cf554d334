"""PPO critic values as an SVEB method (SPEC §4.5, §8): ``ppo-1`` (a critic that never saw the
state's problem, cross-fitted by problem) and ``ppo-n`` (a critic trained on the G initial
rollouts of the cases' own problems), each with the λ its critic was trained with
(``ppo-1?lam=0.95``, ``ppo-n?lam=1.0``).

The estimator holds no math of its own: the values come from a trained critic
(:class:`hista.critic.model.ValueModel`) that the caller hands over with :meth:`use_critic`
(``needs_model``); ``sveb eval --critic DIR`` finds the critic whose mode and λ match."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional, Sequence

import torch

from ..critic.model import values_by_prompt
from ..critic.targets import gae_advantages
from ..types import Rollout, RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig, state_length


@dataclasses.dataclass
class PPOConfig(EstimatorConfig):
    """``lam``: the GAE λ of the critic's training targets (paper: 0.95 or 1.0); it selects
    the critic, it does not change how values are read."""

    lam: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam must be a number in [0, 1], got {self.lam!r}")
        self.lam = float(self.lam)


class _PPOCritic(Estimator):
    """V(s) = a trained critic's value at s: the value head's output at the state's last token
    (SPEC §4.5). At a rollout's end (t = T) the value is its reward, as for every estimator."""

    config_class = PPOConfig
    needs_model = True
    #: which critic the method reads: ``ppo-1`` (cross-fitted) or ``ppo-n`` (the cases' problems)
    critic_mode: ClassVar[str] = ""

    def __init__(self, config: Optional[PPOConfig] = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.critic: Any = None

    def critic_requirement(self) -> dict:
        """The critic this method needs (SPEC §4.5): ``{"mode": "ppo-1" | "ppo-n", "lam": λ}``."""
        return {"mode": self.critic_mode, "lam": self.config.lam}

    def use_critic(self, critic: Any) -> "_PPOCritic":
        """Read values from ``critic`` (a :class:`hista.critic.model.ValueModel`, or any object
        with its ``values(prompt_ids, completion_ids, terminal=..., batch_size=...)``); returns self."""
        self.critic = critic
        return self

    def _values(self, rollouts: Sequence[Rollout], terminal: bool = False) -> list[torch.Tensor]:
        """The critic's V_0 .. V_{T−1} (``terminal``: .. V_T) of each rollout, one call per prompt."""
        if self.critic is None:
            raise ValueError(f"{self.name} reads a trained critic: train one with `hista critic train --mode "
                             f"{self.critic_mode}` and hand it over with use_critic() (sveb eval: --critic DIR)")
        return values_by_prompt(self.critic, [r.prompt_ids for r in rollouts], [r.completion_ids for r in rollouts],
                                terminal=terminal)

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """The critic's value at each state: V_t of rollout ``s.rollout`` (its reward at t = T),
        or, for a state given by a ``prefix``, the value after the whole prefix."""
        needed: dict[int, Rollout] = {}
        prefixes = []
        for k, s in enumerate(states):
            if s.prefix is not None:
                prefixes.append(k)
                continue
            if s.t < state_length(group, s, k):
                needed.setdefault(s.rollout, group.rollouts[s.rollout])
        order = sorted(needed)
        per_rollout = dict(zip(order, self._values([needed[i] for i in order])))
        after_prefix = self._values([states[k].prefix for k in prefixes], terminal=True) if prefixes else []
        prefix_value = {k: float(v[-1]) for k, v in zip(prefixes, after_prefix)}
        values = []
        for k, s in enumerate(states):
            if k in prefix_value:
                values.append(prefix_value[k])
            elif s.t == len(group.rollouts[s.rollout].completion_ids):
                values.append(group.rollouts[s.rollout].reward)
            else:
                values.append(float(per_rollout[s.rollout][s.t]))
        return torch.tensor(values, dtype=torch.float32)

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """PPO's per-token GAE(λ) advantages over the critic's values (SPEC §4.5, γ = 1)."""
        values = self._values(group.rollouts)
        return [gae_advantages(v, r.reward, gae_lambda) for v, r in zip(values, group.rollouts)]


@register("ppo-1")
class PPO1(_PPOCritic):
    """PPO-1 (SPEC §4.5, paper Table 1): the value of a critic that never saw the state's
    problem (cross-fitted by problem: the fold's critic was trained on the other problems)."""

    label = "PPO-1"
    critic_mode = "ppo-1"


@register("ppo-n")
class PPON(_PPOCritic):
    """PPO-N (SPEC §4.5, paper Table 1): the value of a critic trained on the G initial
    rollouts of the same problems as the cases."""

    label = "PPO-N"
    critic_mode = "ppo-n"
