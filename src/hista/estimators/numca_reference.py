"""Numca's reference profile, ``get("numca", profile="reference")`` (SPEC §4.2): the public
reference implementation (github.com/VOXXXX1874/Hista, ``src/rl/utils/numca_dict.py``, the
Numca trainer and the Numca SVEB script), quirks included. ``docs/estimators.md`` lists every
difference from the default profile (:mod:`hista.estimators.numca`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from ..types import Rollout, RolloutGroup
from . import register
from .milestones import ValueTable
from .numca import Numca, NumcaConfig

STATE_VALUE_RULES = ("macro", "reference_sveb")


@dataclasses.dataclass
class NumcaReferenceConfig(NumcaConfig):
    """The reference preset of :class:`NumcaConfig` (SPEC §4.2; digit runs, persistent tables,
    milestones merged within 50 tokens, repeats included, the final number dropped, unreached
    states 0, ``answered="table"``, and its two leaks, issue 63: the state of s_t from the whole
    completion's milestone path, ``states="path"``, and a table that counts the rollout's own
    reward, ``leave_one_out=False``) plus its two quirks:

    - ``group_padding``: the last segment runs to the group's longest completion, as in the
      reference trainer's padded batch (False: the default profile's segments).
    - ``state_value_rule``: ``"reference_sveb"`` (the reference SVEB script: character units,
      λ = 0 advantages summed where they change) or ``"macro"`` (V of the macro state at t).
    """

    profile: str = "reference"
    parser: str = "digits"
    persist: bool = True
    merge_repeats: bool = True
    states: str = "path"
    leave_one_out: bool = False
    merge_tokens: int = 50
    drop_last: bool = True
    unreached: str = "zero"
    answered: str = "table"
    group_padding: bool = True
    state_value_rule: str = "reference_sveb"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.state_value_rule not in STATE_VALUE_RULES:
            raise ValueError(f"unknown state_value_rule {self.state_value_rule!r}; "
                             f"valid: {', '.join(STATE_VALUE_RULES)}")


def _reference_boundaries(path, length: int, table: ValueTable, reward: float) -> tuple[list[int], list[float]]:
    """Boundaries and values of the reference's segments: a milestone at or before the previous
    boundary starts no segment but replaces the state there; the last segment [p_K, L) ending
    on R exists only when p_K < L."""
    bounds, values = [0], [table.get(frozenset()) or 0.0]
    for p, state in path:
        p = max(0, min(p, length))
        v = table.get(state) or 0.0
        if p > bounds[-1]:
            bounds.append(p)
            values.append(v)
        else:
            values[-1] = v
    if length > bounds[-1]:
        bounds.append(length)
        values.append(float(reward))
    return bounds, values


def reference_segment_advantages(
    path, length: int, table: ValueTable, reward: float, gae_lambda: float
) -> torch.Tensor:
    """Per-position advantages [length] as the reference computes them (SPEC §4.2, reference
    profile; ``length`` = the padded batch length in its trainer, the text length in its SVEB
    script)."""
    bounds, values = _reference_boundaries(path, length, table, reward)
    adv = [0.0] * length
    running = 0.0
    for j in range(len(bounds) - 1, 0, -1):  # float64 GAE over segments, as the reference
        running = (values[j] - values[j - 1]) + gae_lambda * running
        adv[bounds[j - 1] : bounds[j]] = [running] * (bounds[j] - bounds[j - 1])
    return torch.tensor(adv, dtype=torch.float64)


def reference_sveb_value(path, length: int, table: ValueTable, reward: float, c: int, terminal: bool = True) -> float:
    """State value at character position ``c`` by the reference SVEB rule (SPEC §4.2, reference
    profile): V(∅) plus the λ = 0 advantage of every segment that ends before ``c`` and differs
    (by > 1e-6) from the next segment's; at the end of the text (c = length) the last segment's
    advantage R − V is added too (``terminal=False`` leaves that out, for external prefixes)."""
    bounds, values = _reference_boundaries(path, length, table, reward)
    deltas = [b - a for a, b in zip(values[:-1], values[1:])]
    value = table.get(frozenset()) or 0.0
    for j, end in enumerate(bounds[1:]):
        if end - 1 >= c:  # the loop of the reference runs over positions i < c
            break
        if end >= length:  # i + 1 >= len: add the last advantage and stop
            if terminal:
                value += deltas[-1]
            break
        if abs(deltas[j] - deltas[j + 1]) > 1e-6:
            value += deltas[j]
    return value


@register("numca", profile="reference")
class NumcaReference(Numca):
    """Numca as the reference implementation computes it (SPEC §4.2, reference profile):
    segments padded to the group's longest completion, and the SVEB state-value rule."""

    config_class = NumcaReferenceConfig
    reproduces = "github.com/VOXXXX1874/Hista@56d9e7f (trainer and SVEB script)"

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        if not self.config.group_padding:
            return super()._raw_advantages(group, gae_lambda)
        numbers = [self._token_numbers(r, f"rollout {i}", self.config.drop_last) for i, r in enumerate(group.rollouts)]
        table = self._step_table(group, [keys for keys, _ in numbers])
        width = max(len(r.completion_ids) for r in group.rollouts)
        return [reference_segment_advantages(self._path(keys, positions), width, table, r.reward,
                                             gae_lambda)[: len(r.completion_ids)].to(torch.float32)
                for (keys, positions), r in zip(numbers, group.rollouts)]

    def _walk(self, table: ValueTable, rollout: Rollout, external: bool, where: str) -> Callable[[int], float]:
        if self.config.state_value_rule == "macro":
            return super()._walk(table, rollout, external, where)
        text = rollout.completion_text
        keys, chars = self._numbers(text, self.config.drop_last and not external)
        path = self._path(keys, chars)  # reference SVEB: character positions, merged in characters

        def value(t: int) -> float:
            if rollout.offsets is None and t > 0:
                raise ValueError(f"numca needs Rollout.offsets at {where} to find the state's character position")
            c = rollout.offsets[t - 1][1] if t > 0 else 0
            return reference_sveb_value(path, len(text), table, rollout.reward, c, terminal=not external)

        return value
