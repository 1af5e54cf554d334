"""How much a state's value reads its own rollout's outcome (issue 63, docs/estimators.md "Valid
baselines"): a baseline for the state s_t of rollout i may use s_t and the other rollouts of the
group, never R_i or rollout i's tokens after t. A value that moves with R_i credits the tokens
after s_t with their own rollout's outcome, which a one-sample Monte-Carlo value does (cheap MAE
in SVEB) and a training baseline must not (the advantage of every later token goes to zero)."""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch

from ..types import RolloutGroup, State
from .base import Estimator, others_mean

__all__ = ["reward_leak", "without_reward"]


def without_reward(group: RolloutGroup, i: int) -> RolloutGroup:
    """``group`` with rollout i's reward replaced by the mean of the other rollouts' rewards, as a
    baseline for a state of rollout i may see it (SVEB's leak-free protocol, docs/sveb.md
    "Protocols"): an estimator that reads R_i reads nothing of rollout i's outcome. Rollout i's
    tokens after the state stay in place (its terminal state, V(T) = R_i in Hista, the probe and
    the critics, would otherwise be the state); that no estimator reads them is the contract test's
    other half (tests/estimators/test_valid_baselines.py)."""
    rewards = torch.tensor([r.reward for r in group.rollouts], dtype=torch.float64)
    rollouts = list(group.rollouts)
    rollouts[i] = dataclasses.replace(rollouts[i], reward=float(others_mean(rewards)[i]))
    return dataclasses.replace(group, rollouts=rollouts)


def reward_leak(est: Estimator, group: RolloutGroup, states: Optional[Sequence[State]] = None) -> torch.Tensor:
    """|V(s) − V'(s)| for each state s = s_{i,t} of ``group``, where V' is the value with rollout
    i's reward flipped (R_i → 1 − R_i; rewards in [0, 1]): 0 for a valid baseline, 1/G for the
    group mean. ``states``: default every s_{i,t} with t < T_i. A float32 tensor [len(states)]."""
    if states is None:
        states = [State(rollout=i, t=t) for i, r in enumerate(group.rollouts) for t in range(len(r.completion_ids))]
    base = est.state_values(group, states)
    out = torch.zeros(len(states))
    for i in sorted({s.rollout for s in states}):
        rows = [k for k, s in enumerate(states) if s.rollout == i]
        rollouts = list(group.rollouts)
        rollouts[i] = dataclasses.replace(rollouts[i], reward=1.0 - rollouts[i].reward)
        flipped = dataclasses.replace(group, rollouts=rollouts)
        out[rows] = (est.state_values(flipped, [states[k] for k in rows]) - base[rows]).abs().float().cpu()
    return out
