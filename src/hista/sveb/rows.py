"""One case of SVEB results: what ``sveb eval`` and ``sveb sweep`` record for a case, and what every
summary reads (``metrics``, ``paired``, ``ranks``, ``segments``, ``selection``, ``figures``, the
report and the sweep).

Reading order:

1. ``CaseRow``             the fields, in the order a results file holds them
2. ``from_json``, ``to_json``  a row of a results file (``cases[k]``) or of a sweep's values file,
                           and back, byte for byte
3. ``value``, ``grpo``        the readings every summary shares: a method's value and GRPO's
                           baseline, NaN when not a finite number

A results file is checked against its schema by :func:`hista.sveb.results.read` before its rows are
made; ``from_json`` only maps the checked object onto the fields, so a row holds the numbers as the
file wrote them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

__all__ = ["CaseRow", "RowState", "GRPO_FIELD", "finite_or_nan"]

#: The field holding a case's GRPO baseline: the mean reward of the case's group as the methods were
#: shown it (the others' mean under the leak-free protocol). Every comparison against GRPO reads it
#: through :attr:`CaseRow.grpo`.
GRPO_FIELD = "group_mean"


@dataclasses.dataclass(frozen=True)
class RowState:
    """The case's state: rollout ``rollout`` of its group after its first ``t`` completion tokens."""

    rollout: int
    t: int


@dataclasses.dataclass(frozen=True)
class CaseRow:
    """One case: its id and field, the Monte-Carlo ``target`` (the mean of its ``continuations``'
    rewards), the GRPO baseline ``group_mean``, each method's value (None where it gave none) and
    ``leak`` (|ΔV| at the state when the state's own rollout's reward is flipped), the resolved
    ``structure`` of the methods that report one. ``problem``, ``state`` and ``length`` (completion
    tokens of the state's rollout) are None in rows written before results recorded them; ``leak``
    is empty in rows written before issue 63."""

    case_id: str
    field: str
    target: float
    continuations: tuple[float, ...]
    values: Mapping[str, Optional[float]]
    group_mean: Optional[float] = None
    problem: Optional[str] = None
    state: Optional[RowState] = None
    length: Optional[int] = None
    leak: Mapping[str, Optional[float]] = dataclasses.field(default_factory=dict)
    structure: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CaseRow:
        """The row of a results file's ``cases`` (checked by :func:`hista.sveb.results.read`) or of
        a sweep's values file; a ``kind`` key (the values file's) is dropped."""
        state = obj.get("state")
        return cls(case_id=obj["case_id"], field=obj["field"], target=obj["target"],
                   continuations=tuple(obj["continuations"]), values=dict(obj["values"]),
                   group_mean=obj.get(GRPO_FIELD), problem=obj.get("problem"),
                   state=None if state is None else RowState(rollout=state["rollout"], t=state["t"]),
                   length=obj.get("length"), leak=dict(obj.get("leak", {})),
                   structure=dict(obj.get("structure", {})))

    def to_json(self) -> dict[str, Any]:
        """The row as a results file holds it, keys in ``sveb eval``'s order; ``problem``,
        ``group_mean``, ``state`` and ``length`` only when known, ``structure`` only when some
        method reported one."""
        out: dict[str, Any] = {"case_id": self.case_id}
        if self.problem is not None:
            out["problem"] = self.problem
        out.update(field=self.field, target=self.target)
        if self.group_mean is not None:
            out[GRPO_FIELD] = self.group_mean
        out["continuations"] = list(self.continuations)
        if self.state is not None:
            out["state"] = {"rollout": self.state.rollout, "t": self.state.t}
        if self.length is not None:
            out["length"] = self.length
        out.update(values=dict(self.values), leak=dict(self.leak))
        if self.structure:
            out["structure"] = dict(self.structure)
        return out

    def with_values(self, values: Mapping[str, Optional[float]]) -> CaseRow:
        """The same case with ``values`` as its methods' values."""
        return dataclasses.replace(self, values=dict(values))

    def value(self, method: str) -> float:
        """The method's value, or NaN when it gave none, or one that is not a finite number."""
        return finite_or_nan(self.values.get(method))

    @property
    def grpo(self) -> float:
        """The GRPO baseline (``group_mean``), or NaN when the row has none or it is not finite."""
        return finite_or_nan(self.group_mean)


def finite_or_nan(x: Any) -> float:
    """``x`` as a float when it is a finite number (not a boolean), else NaN."""
    if x is None or isinstance(x, bool):
        return math.nan
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan
