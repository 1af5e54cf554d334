"""Numca, numerical-milestone credit assignment (SPEC §4.2; paper §5.1, Algorithm 1).

A macro state is the set of distinct numbers a response has written so far (∅ at the start).
V(S) is the mean final reward of the responses of the prompt that passed through S; a state of
rollout i is valued by the *other* responses only (leave-one-out, issue 63), from the numbers its
own first t tokens complete. A response is cut into segments at its milestones (the tokens that
complete a new number), each segment's TD error is the change of V across it, and GAE over
segments gives the per-token advantages. Number parsing lives in
:mod:`hista.estimators.milestones`.

This module is the default profile (SPEC §4.2); ``get("numca", profile="reference")`` is
:mod:`hista.estimators.numca_reference`, which overrides the advantage and state-value rules and
keeps the reference's leaks (``states="path"``, ``leave_one_out=False``).

State: with ``persist=True`` the estimator keeps one value table per ``prompt_id`` across
``token_advantages`` calls (one call = one training step of that prompt), as the reference
trainer does; ``reset()`` forgets them, ``state_dict()`` gives them for a checkpoint and
``load_state_dict()`` restores them, checked. With ``persist=False`` (the default) it
is a pure function of the group.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Callable, Optional, Sequence

import torch

from ..errors import InputError
from ..types import Rollout, RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig, state_field
from .gae import points_gae
from .milestones import (
    PARSERS,
    LeftOut,
    StateId,
    ValueTable,
    chain_states,
    parse_numbers,
    path_states,
    token_positions,
    whole_at,
)

UNREACHED = ("fallback", "zero")
ANSWERED = ("table", "reward")
STATES = ("prefix", "path")


@dataclasses.dataclass
class NumcaConfig(EstimatorConfig):
    """Configuration of Numca (SPEC §4.2). ``profile`` is recorded, set by the estimator class.

    - ``parser``: ``"default"`` (integers, decimals, fractions, normalised) or ``"digits"``
      (maximal digit runs, the reference's rule); see :mod:`hista.estimators.milestones`.
    - ``states``: how the macro state of s_{i,t} is found. ``"prefix"``: the numbers its first
      t tokens hold whole (a number counts once a character follows that no number goes on
      with: "4" may become "46", "3." may become "3.5"), its milestone the token holding that
      character; s_t alone decides it. ``"path"`` (reference): the state of the whole
      completion's merged milestone path at t, milestones at a number's first character; it
      reads the tokens after t (the rest of the number, the merging, which number is the last).
    - ``leave_one_out``: a state of rollout i is valued by the *other* responses (rollout i
      left out of the table); False (reference): the table counts rollout i's own reward.
    - ``merge_tokens``: milestones less than this many tokens before the next are merged forward
      (0: none). With ``states="prefix"`` it only moves segment starts (which earlier state's
      value a token's advantage reads), and that choice looks ahead.
    - ``drop_last``: drop the final number of each response (usually the answer) from the table
      and the milestones (with ``"prefix"`` a state still counts it, the others' tables do not).
    - ``persist``: keep the value tables per ``prompt_id`` across calls (see ``reset``).
    - ``merge_repeats``: repeated occurrences of a number also take part in the merging
      (reference quirk; by default only a number's first occurrence is a milestone).
    - ``unreached``: value of a macro state no response reached: ``"fallback"`` to the last
      known state on the path, or ``"zero"`` (reference).
    - ``answered`` (with ``drop_last``): the value of a rollout's prefix that already holds the
      milestone of the response's final number (the answer): ``"table"``, the value of the
      macro state before the answer, or ``"reward"``, the rollout's own reward (the SVEB study's
      choice before issue 63, results/sveb-study: it reads R_i). It holds for the state values
      and the advantages alike: with ``"reward"`` the answer's milestone is one more segment
      boundary, worth R.

    The defaults make a valid baseline (docs/estimators.md "Valid baselines"): V_i(s_t) reads
    neither R_i nor rollout i's tokens after t, and no token's advantage does either.
    """

    profile: str = "default"
    parser: str = "default"
    states: str = "prefix"
    leave_one_out: bool = True
    merge_tokens: int = 0
    drop_last: bool = False
    persist: bool = False
    merge_repeats: bool = False
    unreached: str = "fallback"
    answered: str = "table"

    def __post_init__(self) -> None:
        for name, valid in (("parser", PARSERS), ("unreached", UNREACHED), ("states", STATES),
                            ("answered", ANSWERED)):
            if getattr(self, name) not in valid:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(valid)}")
        if self.merge_tokens < 0:
            raise ValueError(f"merge_tokens must be >= 0, got {self.merge_tokens}")
        if self.answered == "reward" and not self.drop_last:
            raise ValueError("answered='reward' values the final number that drop_last drops: set drop_last=True")


@register("numca")
class Numca(Estimator):
    """Numca state values and token advantages (SPEC §4.2). ``get("numca", **overrides)``; with
    ``persist=True`` the estimator holds value tables (see ``reset``). The reference profile
    overrides the hooks ``_rollout_advantages`` and ``_state_value``."""

    label = "Numca"
    config_class = NumcaConfig
    needs_text = True

    def __init__(self, config: Optional[NumcaConfig] = None, **overrides):
        super().__init__(config, **overrides)
        self._tables: dict[str, ValueTable] = {}

    def reset(self, prompt_id: Optional[str] = None) -> None:
        """Forget the persisted value tables (all of them, or one prompt's; SPEC §4.2 ``persist``)."""
        if prompt_id is None:
            self._tables.clear()
        else:
            self._tables.pop(prompt_id, None)

    @property
    def tables(self) -> dict[str, ValueTable]:
        """The persisted value tables by prompt id (empty unless ``persist=True``; SPEC §4.2)."""
        return self._tables

    def state_dict(self) -> Optional[dict]:
        """With ``persist=True``, the persisted value tables by prompt id (SPEC §4.2, §9: a
        checkpoint keeps them, so a resumed run's values start where the run stopped), each as
        :meth:`ValueTable.state_dict` gives it; None with ``persist=False`` (nothing kept)."""
        if not self.config.persist:
            return None
        return {"tables": {prompt: table.state_dict() for prompt, table in self._tables.items()}}

    def load_state_dict(self, state: dict, *, hidden_size: Optional[int] = None) -> None:
        """Restore the tables :meth:`state_dict` gave, checked strictly first (they are
        read back from a checkpoint): ``{"tables": {prompt id: table}}``, each table as
        :meth:`ValueTable.from_state` checks it. Anything else is an InputError naming the
        field, and the tables are left as they were. ``hidden_size`` is unused (Numca reads no
        hidden states). With ``persist=False``: the default's (no state)."""
        if not self.config.persist:
            return super().load_state_dict(state)
        tables = state_field(state, "tables", "Numca's state", dict, "a mapping of prompt ids")
        loaded = {}
        for prompt, table in tables.items():
            if not isinstance(prompt, str) or not prompt:
                raise InputError(f"expected prompt ids (non-empty strings) as keys, got {prompt!r:.60}", field="tables")
            loaded[prompt] = ValueTable.from_state(table, f"tables[{prompt[:60]!r}]")
        self._tables = loaded

    # -- parsing ----------------------------------------------------------------------------

    def _numbers(self, text: str, drop_last: bool) -> tuple[list[str], list[int]]:
        """The keys of the numbers of ``text`` and the characters of their milestones:
        ``states="prefix"``, the first character after the number that no number goes on with
        (a number the text ends before that is left out: it is never whole); ``"path"``, its
        first character."""
        numbers = parse_numbers(text, self.config.parser)
        if drop_last:
            numbers = numbers[:-1]
        if self.config.states == "path":
            return [n.key for n in numbers], [n.start for n in numbers]
        whole = [(n.key, c) for n, c in zip(numbers, whole_at(text, numbers, self.config.parser)) if c is not None]
        return [key for key, _ in whole], [c for _, c in whole]

    def _token_numbers(self, rollout: Rollout, where: str, drop_last: bool) -> tuple[list[str], list[int]]:
        """The keys of a completion's numbers and their milestone positions p (in tokens)."""
        if rollout.offsets is None and len(rollout.completion_ids) > 0:
            raise ValueError(
                f"numca needs Rollout.offsets (the character span of every completion token) at {where}; "
                "rollout engines fill them, or use hista.rollout.offsets.decode_with_offsets"
            )
        keys, chars = self._numbers(rollout.completion_text, drop_last)
        return keys, token_positions(chars, rollout.offsets or [])

    def _path(self, keys: list[str], positions: list[int]) -> list[tuple[int, StateId]]:
        return path_states(keys, positions, self.config.merge_tokens, self.config.merge_repeats)

    # -- value table ------------------------------------------------------------------------

    def _table_keys(self, group: RolloutGroup) -> list[list[str]]:
        """Each response's numbers as the value table counts them (the final one dropped with
        ``drop_last``)."""
        return [self._numbers(r.completion_text, self.config.drop_last)[0] for r in group.rollouts]

    def _group_table(self, group: RolloutGroup, keys: list[list[str]]) -> ValueTable:
        table = ValueTable()
        for k, r in zip(keys, group.rollouts):
            table.add(k, r.reward)
        return table

    def _step_table(self, group: RolloutGroup, keys: list[list[str]]) -> ValueTable:
        """The table of this step: the group's own, or (persist=True) the prompt's persisted
        table after adding the group to it."""
        if not self.config.persist:
            return self._group_table(group, keys)
        if not group.prompt_id:
            raise ValueError("numca with persist=True keys its value tables by RolloutGroup.prompt_id; it is empty")
        table = self._tables.setdefault(group.prompt_id, ValueTable())
        for k, r in zip(keys, group.rollouts):
            table.add(k, r.reward)
        return table

    def _value(self, table: ValueTable | LeftOut, chain: list[StateId], j: int) -> float:
        """V(chain[j]); an unreached state falls back along the chain (or is 0, ``"zero"``)."""
        value = table.get(chain[j])
        if value is not None or self.config.unreached == "zero":
            return 0.0 if value is None else value
        for state in reversed(chain[:j]):
            value = table.get(state)
            if value is not None:
                return value
        return 0.0  # an empty table (no rollout ever seen)

    # -- advantages -------------------------------------------------------------------------

    def _answer(self, rollout: Rollout, where: str) -> Optional[int]:
        """With ``answered="reward"`` (and ``drop_last``), the milestone of the response's final
        number, the answer (None without one, or, with ``states="prefix"``, when the text ends
        before it is whole); None otherwise."""
        if not (self.config.answered == "reward" and self.config.drop_last):
            return None
        kept, _ = self._token_numbers(rollout, where, True)
        keys, positions = self._token_numbers(rollout, where, False)
        return positions[-1] if len(keys) > len(kept) else None

    def value_points(self, group: RolloutGroup) -> list[list[int]]:
        """Per rollout, the starts of its segments before T: 0, the merged milestones p_1 … p_K
        (the final number's dropped with ``drop_last``) and, with ``answered="reward"``, the
        answer's milestone: the states whose values the GAE of :meth:`_raw_advantages` reads (by
        default the value changes only there)."""
        points = []
        for i, r in enumerate(group.rollouts):
            length = len(r.completion_ids)
            if not length:
                points.append([])
                continue
            keys, positions = self._token_numbers(r, f"rollout {i}", self.config.drop_last)
            answer = self._answer(r, f"rollout {i}")
            starts = {0, *(p for p, _ in self._path(keys, positions)), *([] if answer is None else [answer])}
            points.append(sorted(p for p in starts if p < length))
        return points

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """Segment GAE over each rollout's value points (SPEC §4.2): boundaries
        :meth:`value_points` and T, values :meth:`state_values` there and R_i at the end (with
        ``persist=True`` after adding the group to its prompt's table). With λ = 1 every token
        gets R_i − V at the start of its segment."""
        if self.config.persist:
            self._step_table(group, self._table_keys(group))
        points = self.value_points(group)
        values = self.state_values(group, [State(rollout=i, t=c) for i, cs in enumerate(points) for c in cs])
        return points_gae(points, values, group, gae_lambda)

    # -- state values -----------------------------------------------------------------------

    def _table_for(self, group: RolloutGroup, keys: list[list[str]]) -> ValueTable:
        """The stored table of the group's prompt (persist=True, after a token_advantages call),
        else the group's own table. Never writes."""
        if self.config.persist and group.prompt_id in self._tables:
            return self._tables[group.prompt_id]
        return self._group_table(group, keys)

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """V of the macro state holding the first t completion tokens (SPEC §4.2).

        ``states="prefix"``: the numbers those tokens hold whole, for ``State(rollout=i, t)``
        and ``State(prefix=r)`` alike (the whole prefix, or its first ``t`` tokens when
        0 < t < len). ``"path"``: for ``State(rollout=i, t)`` the state S_k of rollout i's merged
        milestone path (final number dropped with ``drop_last``) with the largest p_k ≤ t; an external prefix keeps
        all its numbers, merged among themselves. Values come from the group's table (or the
        persisted one), for a state of rollout i without rollout i (``leave_one_out``); an
        unreached state falls back to the last known state of its chain.
        """
        if len(group.rollouts) == 0:
            return torch.full((len(states),), float("nan"))
        keys = self._table_keys(group)
        table = self._table_for(group, keys)
        walks: dict[object, Callable[[int], float]] = {}  # per rollout or prefix: t -> V
        out = []
        for k, s in enumerate(states):
            rollout, external = self._state_rollout(group, s, k)
            T = len(rollout.completion_ids)
            t = T if external and not 0 < s.t < T else s.t
            if not 0 <= t <= T:
                raise ValueError(f"states[{k}]: t={t} outside [0, {T}]")
            key = id(s.prefix) if external else s.rollout
            if key not in walks:
                values = table
                if self.config.leave_one_out and not external:
                    values = table.without(keys[s.rollout], rollout.reward)
                walks[key] = self._walk(values, rollout, external, f"states[{k}]")
            out.append(walks[key](t))
        return torch.tensor(out, dtype=torch.float32)

    def _walk(self, table: ValueTable | LeftOut, rollout: Rollout, external: bool,
              where: str) -> Callable[[int], float]:
        """t -> V of the macro state holding the first t tokens of ``rollout`` (SPEC §4.2), from
        ``table`` (the group's without ``rollout`` for its own states, ``leave_one_out``). With
        ``answered="reward"`` a rollout's prefix that holds the milestone of its final number
        is worth the rollout's reward."""
        path_rule = self.config.states == "path"
        keys, pos = self._token_numbers(rollout, where, path_rule and self.config.drop_last and not external)
        answer = None if external else self._answer(rollout, where)
        path = path_states(keys, pos, self.config.merge_tokens if path_rule else 0, self.config.merge_repeats)
        starts = [p for p, _ in path]
        chain = chain_states(keys)
        index = {state: j for j, state in enumerate(chain)}

        def value(t: int) -> float:
            if answer is not None and answer <= t:  # the answer's milestone is inside the prefix
                return float(rollout.reward)
            reached = bisect.bisect_right(starts, t)
            return self._value(table, chain, index[path[reached - 1][1]] if reached else 0)

        return value

    def _state_rollout(self, group: RolloutGroup, s: State, k: int) -> tuple[Rollout, bool]:
        if s.prefix is not None:
            return s.prefix, True
        if s.rollout is None or not 0 <= s.rollout < len(group.rollouts):
            raise ValueError(f"states[{k}]: rollout index {s.rollout} is not in the group of {len(group.rollouts)}")
        return group.rollouts[s.rollout], False
