"""Numca, numerical-milestone credit assignment (SPEC §4.2; paper §5.1, Algorithm 1).

A macro state is the set of distinct numbers a response has written so far (∅ at the start).
V(S) is the mean final reward of the responses of the prompt that passed through S. A response
is cut into segments at its milestones (the tokens holding a new number's first character),
each segment's TD error is the change of V across it, and GAE over segments gives the
per-token advantages. Number parsing lives in :mod:`hista.estimators.milestones`.

Two profiles: ``"default"`` follows SPEC §4.2; ``"reference"`` reproduces the public reference
implementation (github.com/VOXXXX1874/Hista, ``src/rl/utils/numca_dict.py``, the Numca trainer
and the Numca SVEB script), quirks included. ``docs/estimators.md`` lists every
difference.

State: with ``persist=True`` the estimator keeps one value table per ``prompt_id`` across
``token_advantages`` calls (one call = one training step of that prompt), as the reference
trainer does; ``reset()`` forgets them. With ``persist=False`` (default profile) it is a pure
function of the group.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch

from ..types import Rollout, RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig
from .gae import segment_gae
from .milestones import PARSERS, ValueTable, macro_path, parse_numbers, state_chain, token_positions

PROFILES = ("default", "reference")
UNREACHED = ("fallback", "zero")
STATE_VALUE_RULES = ("macro", "reference_sveb")


@dataclasses.dataclass
class NumcaConfig(EstimatorConfig):
    """Configuration of Numca (SPEC §4.2). ``profile`` records which preset it started from.

    - ``parser``: ``"default"`` (integers, decimals, fractions, normalised) or ``"digits"``
      (maximal digit runs, the reference's rule); see :mod:`hista.estimators.milestones`.
    - ``merge_tokens``: milestones less than this many tokens before the next are merged forward.
    - ``drop_last``: drop the final number of each response (usually the answer).
    - ``persist``: keep the value tables per ``prompt_id`` across calls (see ``reset``).
    - ``merge_repeats``: repeated occurrences of a number also take part in the merging
      (reference quirk; by default only a number's first occurrence is a milestone).
    - ``unreached``: value of a macro state no response reached: ``"fallback"`` to the last
      known state on the path, or ``"zero"`` (reference).
    - ``group_padding``: the last segment runs to the group's longest completion, as in the
      reference trainer's padded batch (reference quirk, see the docs).
    - ``state_value_rule``: ``"macro"`` (V of the macro state at t) or ``"reference_sveb"``
      (the reference SVEB script: character units, λ = 0 advantages summed where they change).
    """

    profile: str = "default"
    parser: str = "default"
    merge_tokens: int = 50
    drop_last: bool = True
    persist: bool = False
    merge_repeats: bool = False
    unreached: str = "fallback"
    group_padding: bool = False
    state_value_rule: str = "macro"

    def __post_init__(self) -> None:
        for name, valid in (("profile", PROFILES), ("parser", PARSERS), ("unreached", UNREACHED),
                            ("state_value_rule", STATE_VALUE_RULES)):
            if getattr(self, name) not in valid:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(valid)}")
        if self.merge_tokens < 0:
            raise ValueError(f"merge_tokens must be >= 0, got {self.merge_tokens}")


def profile_config(profile: str = "default") -> NumcaConfig:
    """The preset configuration of a profile."""
    if profile == "default":
        return NumcaConfig()
    if profile == "reference":
        return NumcaConfig(profile="reference", parser="digits", persist=True, merge_repeats=True,
                           unreached="zero", group_padding=True, state_value_rule="reference_sveb")
    raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")


@register("numca")
class Numca(Estimator):
    """Numca state values and token advantages (SPEC §4.2). ``get("numca", profile=...,
    **overrides)``; with ``persist=True`` the estimator holds value tables (see ``reset``)."""

    name = "numca"
    config_class = NumcaConfig

    def __init__(self, config: NumcaConfig | None = None, profile: str = "default", **overrides):
        super().__init__(config or profile_config(profile), **overrides)
        self._tables: dict[str, ValueTable] = {}

    def reset(self, prompt_id: Optional[str] = None) -> None:
        """Forget the persisted value tables (all of them, or one prompt's)."""
        if prompt_id is None:
            self._tables.clear()
        else:
            self._tables.pop(prompt_id, None)

    @property
    def tables(self) -> dict[str, ValueTable]:
        """The persisted value tables by prompt id (empty unless ``persist=True``)."""
        return self._tables

    # -- parsing ----------------------------------------------------------------------------

    def _numbers(self, text: str, drop_last: bool) -> tuple[list[str], list[int]]:
        numbers = parse_numbers(text, self.config.parser)
        if drop_last:
            numbers = numbers[:-1]
        return [n.key for n in numbers], [n.start for n in numbers]

    def _token_numbers(self, rollout: Rollout, where: str, drop_last: bool) -> tuple[list[str], list[int]]:
        """The keys of a completion's numbers and their milestone positions p (in tokens)."""
        if rollout.offsets is None and len(rollout.completion_ids) > 0:
            raise ValueError(
                f"numca needs Rollout.offsets (the character span of every completion token) at {where}; "
                "rollout engines fill them, or use hista.rollout.offsets.decode_with_offsets"
            )
        keys, chars = self._numbers(rollout.completion_text, drop_last)
        return keys, token_positions(chars, rollout.offsets or [])

    def _path(self, keys: list[str], positions: list[int]) -> list[tuple[int, frozenset]]:
        return macro_path(keys, positions, self.config.merge_tokens, self.config.merge_repeats)

    # -- value table ------------------------------------------------------------------------

    def _group_table(self, group: RolloutGroup, keys: list[list[str]]) -> ValueTable:
        table = ValueTable()
        for k, r in zip(keys, group.rollouts):
            table.add(k, r.reward)
        return table

    def _value(self, table: ValueTable, chain: list[frozenset], j: int) -> float:
        """V(chain[j]); an unreached state falls back along the chain (or is 0, ``"zero"``)."""
        value = table.get(chain[j])
        if value is not None or self.config.unreached == "zero":
            return 0.0 if value is None else value
        for state in reversed(chain[:j]):
            value = table.get(state)
            if value is not None:
                return value
        return 0.0  # an empty table (no rollout ever seen)

    @staticmethod
    def _known(table: ValueTable, state: frozenset) -> float:
        value = table.get(state)
        return 0.0 if value is None else value  # the states of a recorded response are known

    # -- advantages -------------------------------------------------------------------------

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """Segment GAE over each rollout's macro states (SPEC §4.2): boundaries 0, p_1 … p_K, T
        with values V(∅), V(S_1) … V(S_K), R_i."""
        parsed = [self._token_numbers(r, f"rollout {i}", self.config.drop_last) for i, r in enumerate(group.rollouts)]
        table = self._step_table(group, [keys for keys, _ in parsed])
        lengths = [len(r.completion_ids) for r in group.rollouts]
        padded = max(lengths)  # the reference trainer's padded batch width (group_padding)
        out = []
        for (keys, positions), r, T in zip(parsed, group.rollouts, lengths):
            path = self._path(keys, positions)
            if self.config.group_padding:
                adv = reference_segment_advantages(path, padded, table, r.reward, gae_lambda)[:T]
            else:
                bounds = [0, *(p for p, _ in path), T]
                values = [self._known(table, frozenset()), *(self._known(table, s) for _, s in path), r.reward]
                adv = segment_gae(bounds, torch.tensor(values, dtype=torch.float64), T, gae_lambda)
            out.append(adv.to(torch.float32))
        return out

    def _step_table(self, group: RolloutGroup, keys: list[list[str]]) -> ValueTable:
        """The table this step's advantages use: the group's own, or (persist=True) the prompt's
        persisted table after adding the group to it."""
        if not self.config.persist:
            return self._group_table(group, keys)
        if not group.prompt_id:
            raise ValueError("numca with persist=True keys its value tables by RolloutGroup.prompt_id; it is empty")
        table = self._tables.setdefault(group.prompt_id, ValueTable())
        for k, r in zip(keys, group.rollouts):
            table.add(k, r.reward)
        return table

    # -- state values -----------------------------------------------------------------------

    def _table_for(self, group: RolloutGroup) -> ValueTable:
        """The stored table of the group's prompt (persist=True, after a token_advantages call),
        else the group's own table. Never writes."""
        if self.config.persist and group.prompt_id in self._tables:
            return self._tables[group.prompt_id]
        keys = [self._numbers(r.completion_text, self.config.drop_last)[0] for r in group.rollouts]
        return self._group_table(group, keys)

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """V of the macro state holding the first t completion tokens (SPEC §4.2).

        ``State(rollout=i, t)``: the merged milestone path of rollout i (final number dropped),
        the state S_k with the largest p_k ≤ t. ``State(prefix=r)``: the prefix's own numbers,
        all of them (a prefix does not end with the answer), merged among themselves; the state
        is the whole prefix, or its first ``t`` tokens when 0 < t < len. Values come from the
        group's table (or the persisted one); an unreached state falls back to the last known
        state of its chain. With ``state_value_rule="reference_sveb"`` see
        :func:`reference_sveb_value`.
        """
        if len(group.rollouts) == 0:
            return torch.full((len(states),), float("nan"))
        table = self._table_for(group)
        out = []
        for k, s in enumerate(states):
            rollout, external = self._state_rollout(group, s, k)
            T = len(rollout.completion_ids)
            t = T if external and not 0 < s.t < T else s.t
            if not 0 <= t <= T:
                raise ValueError(f"states[{k}]: t={t} outside [0, {T}]")
            drop = self.config.drop_last and not external
            if self.config.state_value_rule == "reference_sveb":
                out.append(self._sveb_value(table, rollout, t, drop, terminal=not external, where=f"states[{k}]"))
                continue
            keys, pos = self._token_numbers(rollout, f"states[{k}]", drop)
            path = self._path(keys, pos)
            reached = [st for p, st in path if p <= t]
            current = reached[-1] if reached else frozenset()
            chain = state_chain(keys)
            out.append(self._value(table, chain, chain.index(current)))
        return torch.tensor(out, dtype=torch.float32)

    def _state_rollout(self, group: RolloutGroup, s: State, k: int) -> tuple[Rollout, bool]:
        if s.prefix is not None:
            return s.prefix, True
        if s.rollout is None or not 0 <= s.rollout < len(group.rollouts):
            raise ValueError(f"states[{k}]: rollout index {s.rollout} is not in the group of {len(group.rollouts)}")
        return group.rollouts[s.rollout], False

    def _sveb_value(self, table: ValueTable, rollout: Rollout, t: int, drop: bool, terminal: bool, where: str) -> float:
        if rollout.offsets is None and t > 0:
            raise ValueError(f"numca needs Rollout.offsets at {where} to find the state's character position")
        text = rollout.completion_text
        keys, chars = self._numbers(text, drop)
        c = rollout.offsets[t - 1][1] if t > 0 else 0
        path = self._path(keys, chars)  # reference SVEB: character positions, merged in characters
        return reference_sveb_value(path, len(text), table, rollout.reward, c, terminal=terminal)


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
    """Per-position advantages [length] as the reference computes them (``length`` = the padded
    batch length in its trainer, the text length in its SVEB script)."""
    bounds, values = _reference_boundaries(path, length, table, reward)
    adv = [0.0] * length
    running = 0.0
    for j in range(len(bounds) - 1, 0, -1):  # float64 GAE over segments, as the reference
        running = (values[j] - values[j - 1]) + gae_lambda * running
        adv[bounds[j - 1] : bounds[j]] = [running] * (bounds[j] - bounds[j - 1])
    return torch.tensor(adv, dtype=torch.float64)


def reference_sveb_value(path, length: int, table: ValueTable, reward: float, c: int, terminal: bool = True) -> float:
    """State value at character position ``c`` by the reference SVEB rule: V(∅) plus the λ = 0
    advantage of every segment that ends before ``c`` and differs (by > 1e-6) from the next
    segment's; at the end of the text (c = length) the last segment's advantage R − V is added
    too (``terminal=False`` leaves that out, for external prefixes)."""
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
