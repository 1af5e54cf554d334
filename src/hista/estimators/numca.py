"""Numca, numerical-milestone credit assignment (SPEC §4.2; paper §5.1, Algorithm 1).

A macro state is the set of distinct numbers a response has written so far (∅ at the start).
V(S) is the mean final reward of the responses of the prompt that passed through S. A response
is cut into segments at its milestones (the tokens holding a new number's first character),
each segment's TD error is the change of V across it, and GAE over segments gives the
per-token advantages. Number parsing lives in :mod:`hista.estimators.milestones`.

This module is the default profile (SPEC §4.2); ``get("numca", profile="reference")`` is
:mod:`hista.estimators.numca_reference`, which overrides the advantage and state-value rules.

State: with ``persist=True`` the estimator keeps one value table per ``prompt_id`` across
``token_advantages`` calls (one call = one training step of that prompt), as the reference
trainer does; ``reset()`` forgets them, ``state_dict()`` gives them for a checkpoint and
``load_state_dict()`` restores them, checked (SPEC §9). With ``persist=False`` (the default) it
is a pure function of the group.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch

from ..errors import InputError
from ..types import Rollout, RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig, state_field
from .gae import segment_gae
from .milestones import EMPTY, PARSERS, StateId, ValueTable, chain_states, parse_numbers, path_states, token_positions

UNREACHED = ("fallback", "zero")
ANSWERED = ("reward", "table")


@dataclasses.dataclass
class NumcaConfig(EstimatorConfig):
    """Configuration of Numca (SPEC §4.2). ``profile`` is recorded, set by the estimator class.

    - ``parser``: ``"default"`` (integers, decimals, fractions, normalised) or ``"digits"``
      (maximal digit runs, the reference's rule); see :mod:`hista.estimators.milestones`.
    - ``merge_tokens``: milestones less than this many tokens before the next are merged forward.
    - ``drop_last``: drop the final number of each response (usually the answer).
    - ``persist``: keep the value tables per ``prompt_id`` across calls (see ``reset``).
    - ``merge_repeats``: repeated occurrences of a number also take part in the merging
      (reference quirk; by default only a number's first occurrence is a milestone).
    - ``unreached``: value of a macro state no response reached: ``"fallback"`` to the last
      known state on the path, or ``"zero"`` (reference).
    - ``answered``: the value of a rollout's prefix that already holds the start of the
      response's final number (the answer, dropped from the path by ``drop_last``):
      ``"reward"``, the rollout's own reward (its continuation from there is a sample of that
      state; the reference SVEB rule gives the reward at the end of the text), or ``"table"``,
      the value of the macro state before the answer. Chosen by the SVEB study
      (results/sveb-study) on its selection half. It holds for the state values and the
      advantages alike: with ``"reward"`` the answer's start is one more segment boundary,
      worth R.
    """

    profile: str = "default"
    parser: str = "default"
    merge_tokens: int = 50
    drop_last: bool = True
    persist: bool = False
    merge_repeats: bool = False
    unreached: str = "fallback"
    answered: str = "reward"

    def __post_init__(self) -> None:
        for name, valid in (("parser", PARSERS), ("unreached", UNREACHED), ("answered", ANSWERED)):
            if getattr(self, name) not in valid:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(valid)}")
        if self.merge_tokens < 0:
            raise ValueError(f"merge_tokens must be >= 0, got {self.merge_tokens}")


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
        """Restore the tables :meth:`state_dict` gave (SPEC §9), checked strictly first (they are
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

    def _path(self, keys: list[str], positions: list[int]) -> list[tuple[int, StateId]]:
        return path_states(keys, positions, self.config.merge_tokens, self.config.merge_repeats)

    # -- value table ------------------------------------------------------------------------

    def _group_table(self, group: RolloutGroup, keys: list[list[str]]) -> ValueTable:
        table = ValueTable()
        for k, r in zip(keys, group.rollouts):
            table.add(k, r.reward)
        return table

    def _value(self, table: ValueTable, chain: list[StateId], j: int) -> float:
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
    def _known(table: ValueTable, state: StateId) -> float:
        value = table.get(state)
        return 0.0 if value is None else value  # the states of a recorded response are known

    # -- advantages -------------------------------------------------------------------------

    def _parsed(self, rollout: Rollout, where: str) -> tuple[list[str], list[int], Optional[int]]:
        """The keys and milestone positions of a completion's numbers (the final one dropped
        with ``drop_last``) and, with ``answered="reward"``, the position of the dropped final
        number (the answer; None otherwise or without numbers)."""
        keys, positions = self._token_numbers(rollout, where, False)
        if not (self.config.drop_last and keys):
            return keys, positions, None
        answer = positions[-1] if self.config.answered == "reward" else None
        return keys[:-1], positions[:-1], answer

    def value_points(self, group: RolloutGroup) -> list[list[int]]:
        """Per rollout, the starts of its segments before T: 0, the merged milestones p_1 … p_K
        and, with ``answered="reward"``, the answer's start (the states whose values the GAE of
        :meth:`_raw_advantages` reads; the value is constant between them)."""
        points = []
        for i, r in enumerate(group.rollouts):
            length = len(r.completion_ids)
            keys, positions, answer = self._parsed(r, f"rollout {i}") if length else ([], [], None)
            starts = {0, *(p for p, _ in self._path(keys, positions)), *([] if answer is None else [answer])}
            points.append(sorted(p for p in starts if p < length))
        return points

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """Segment GAE over each rollout's macro states (SPEC §4.2): boundaries 0, p_1 … p_K, T
        with values V(∅), V(S_1) … V(S_K), R_i; with ``answered="reward"`` the answer's start
        p_A is one more boundary, worth R_i (the value :meth:`state_values` gives there)."""
        parsed = [self._parsed(r, f"rollout {i}") for i, r in enumerate(group.rollouts)]
        table = self._step_table(group, [keys for keys, _, _ in parsed])
        width = max(len(r.completion_ids) for r in group.rollouts)
        return [self._rollout_advantages(self._path(keys, positions), len(r.completion_ids), width, table, r.reward,
                                         gae_lambda, answer).to(torch.float32)
                for (keys, positions, answer), r in zip(parsed, group.rollouts)]

    def _rollout_advantages(self, path: list[tuple[int, StateId]], length: int, width: int, table: ValueTable,
                            reward: float, gae_lambda: float, answer: Optional[int] = None) -> torch.Tensor:
        """One rollout's advantages [T] from its merged macro path (SPEC §4.2): segments
        [0, p_1), …, [p_K, T) with values V(∅), V(S_1) … V(S_K) and R at the end; ``answer``
        (the answer's start p_A >= p_K, or None) splits the last segment at p_A with the value R
        there, so that every token after the answer's first one gets δ = 0. ``width``, the
        group's longest completion, is unused here (the reference pads to it)."""
        bounds = [0, *(p for p, _ in path)]
        values = [self._known(table, EMPTY), *(self._known(table, s) for _, s in path)]
        if answer is not None:
            bounds.append(answer)
            values.append(reward)
        bounds.append(length)
        values.append(reward)
        return segment_gae(bounds, torch.tensor(values, dtype=torch.float64), length, gae_lambda)

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
        state of its chain.
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
            out.append(self._state_value(table, rollout, t, external, f"states[{k}]"))
        return torch.tensor(out, dtype=torch.float32)

    def _state_value(self, table: ValueTable, rollout: Rollout, t: int, external: bool, where: str) -> float:
        """V of the macro state holding the first t tokens of ``rollout`` (SPEC §4.2); an external
        prefix keeps its final number. With ``answered="reward"``, a rollout's prefix that holds
        the start of its final number is worth the rollout's reward."""
        keys, pos = self._token_numbers(rollout, where, False)
        if self.config.drop_last and not external and keys:
            if self.config.answered == "reward" and pos[-1] <= t:  # the answer has begun inside the prefix
                return float(rollout.reward)
            keys, pos = keys[:-1], pos[:-1]
        reached = [st for p, st in self._path(keys, pos) if p <= t]
        current = reached[-1] if reached else EMPTY
        chain = chain_states(keys)
        return self._value(table, chain, chain.index(current))

    def _state_rollout(self, group: RolloutGroup, s: State, k: int) -> tuple[Rollout, bool]:
        if s.prefix is not None:
            return s.prefix, True
        if s.rollout is None or not 0 <= s.rollout < len(group.rollouts):
            raise ValueError(f"states[{k}]: rollout index {s.rollout} is not in the group of {len(group.rollouts)}")
        return group.rollouts[s.rollout], False
