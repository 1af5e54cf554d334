"""PPO critic values (SPEC §4.5): as SVEB methods (§8), ``ppo-1`` (a critic that never saw the
state's problem, cross-fitted by problem) and ``ppo-n`` (a critic trained on the G initial
rollouts of the cases' own problems), each with the λ its critic was trained with
(``ppo-1?lam=0.95``, ``ppo-n?lam=1.0``); in training (§9), ``critic``, the PPO baseline, whose
critic the trainer copies from the policy and trains alongside it.

The estimators hold no math of their own: the values come from a critic
(:class:`hista.critic.model.ValueModel`, or :class:`hista.critic.online.OnlineCritic` in
training) that the caller hands over with :meth:`use_critic` (:class:`ReadsCritic`); ``sveb eval
--critic DIR`` finds the critic whose mode and λ match."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Optional, Sequence

import torch

from ..errors import InputError
from ..types import Rollout, RolloutGroup, State
from . import register
from .base import EstimatorConfig, ReadsCritic, state_length
from .gae import gae_advantages


def critic_values(critic: Any, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], *,
                  terminal: bool = False, batch_size: int = 8) -> list[torch.Tensor]:
    """Per-state values of prompt + completion rows in any order (SPEC §4.5): the rows are
    grouped by prompt, each group goes through ``critic.values`` (a :class:`ValueModel`, or any
    object with its ``values(prompt_ids, completions, terminal=..., batch_size=...)``) once, and
    the values come back in the rows' order."""
    out: list[Optional[torch.Tensor]] = [None] * len(completion_ids)
    by_prompt: dict[tuple, list[int]] = {}
    for k, prompt in enumerate(prompt_ids):
        by_prompt.setdefault(tuple(prompt), []).append(k)
    for prompt, rows in by_prompt.items():
        values = critic.values(list(prompt), [completion_ids[k] for k in rows], terminal=terminal,
                               batch_size=batch_size)
        for k, v in zip(rows, values):
            out[k] = v
    return out


@dataclasses.dataclass
class PPOConfig(EstimatorConfig):
    """``lam``: the GAE λ of the critic's training targets (paper: 0.95 or 1.0); it selects
    the critic, it does not change how values are read."""

    lam: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam must be a number in [0, 1], got {self.lam!r}")
        self.lam = float(self.lam)


class _PPOCritic(ReadsCritic):
    """V(s) = a trained critic's value at s: the value head's output at the state's last token
    (SPEC §4.5). At a rollout's end (t = T) the value is its reward, as for every estimator."""

    config_class = PPOConfig
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
        return critic_values(self.critic, [r.prompt_ids for r in rollouts], [r.completion_ids for r in rollouts],
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


@dataclasses.dataclass
class CriticConfig(EstimatorConfig):
    """The PPO baseline in training (SPEC §4.5). ``lam``: the GAE λ of the critic's targets
    (γ = 1) and the default ``gae_lambda`` of its advantages; ``critic_lr``: AdamW's learning
    rate; ``value_clip``: ε of PPO's clipped value loss around the values the batch was scored
    with (None: plain squared error); ``critic_layers``: the last k decoder layers that train
    (None: all; 0: the head only); ``critic_epochs``: passes over each generation batch;
    ``critic_batch_size``: rollouts per critic optimiser step (and per no-grad forward pass).
    A bad value raises an InputError naming its field."""

    lam: float = 1.0
    critic_lr: float = 1e-5
    value_clip: Optional[float] = 0.2
    critic_layers: Optional[int] = None
    critic_epochs: int = 1
    critic_batch_size: int = 8

    def __post_init__(self) -> None:
        def number(v: Any) -> bool:
            return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)

        def count(v: Any, least: int) -> bool:
            return not isinstance(v, bool) and isinstance(v, int) and v >= least

        checks = [
            ("lam", number(self.lam) and 0.0 <= self.lam <= 1.0, "must be a number in [0, 1]"),
            ("critic_lr", number(self.critic_lr) and self.critic_lr > 0, "must be a finite number > 0"),
            ("value_clip", self.value_clip is None or (number(self.value_clip) and self.value_clip > 0),
             "must be a number > 0, or null (no value clipping)"),
            ("critic_layers", self.critic_layers is None or count(self.critic_layers, 0),
             "must be an integer >= 0 (0: the head only), or null (every layer)"),
            ("critic_epochs", count(self.critic_epochs, 1), "must be an integer >= 1"),
            ("critic_batch_size", count(self.critic_batch_size, 1), "must be an integer >= 1"),
        ]
        for field, ok, text in checks:
            if not ok:
                raise InputError(f"{getattr(self, field)!r}: {text}", field=field)
        self.lam, self.critic_lr = float(self.lam), float(self.critic_lr)
        self.value_clip = None if self.value_clip is None else float(self.value_clip)


@register("critic")
class PPOBaseline(_PPOCritic):
    """The PPO baseline in training (SPEC §4.5): V(s) is the value of a critic that the
    trainer copies from the policy when it starts and trains on every generation batch
    (:class:`hista.critic.online.OnlineCritic`); the advantages are PPO's GAE(λ) over those
    values, with λ = ``gae_lambda`` (default: the critic's ``lam``). Its advantages are left
    unscaled unless the recipe sets ``scale``: a group whose rewards are all equal has a reward
    std of 0 but advantages R − V that are not, and dividing them by 0 + 1e-4 would multiply
    them by 10,000. SVEB cannot provide a critic trained alongside a policy, and refuses it."""

    config_class = CriticConfig
    label = "PPO"
    critic_mode = "online"
    trains_with_policy = True
    default_scale = "none"
    critic_requirement = None  # no critic folder of `hista critic train` serves it (sveb eval reads this)

    def default_gae_lambda(self) -> float:
        """The critic's ``lam`` (SPEC §4.5): its advantages and its targets use one λ unless the
        recipe sets ``gae_lambda`` too (decoupled λ, as VC-PPO does)."""
        return self.config.lam

    def _values(self, rollouts: Sequence[Rollout], terminal: bool = False) -> list[torch.Tensor]:
        if self.critic is None:
            raise ValueError("the critic estimator reads the critic that `hista train` trains alongside the policy; "
                             "outside training hand one over with use_critic()")
        return super()._values(rollouts, terminal)
