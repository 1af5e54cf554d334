"""Cross-fitted estimators in SVEB (docs/sveb.md "Cross-fitted methods"): an estimator
that learns across groups (a :class:`hista.estimators.LearnsAcrossGroups`: the probe) is fitted, for the cases of
each fold of problems, on the rollouts of the other folds only, so that no case's own rollouts
or rewards enter its value, nor those of another case asking the same question (problems:
:func:`hista.sveb.cases.problems_of`).

Before the cases are scored, one pass over the case file's problems reads each problem's
rollouts once (the states of one problem share them) with the hidden states of the layers the
methods read (one forward pass per problem), and adds what each fit needs
(``estimator.data(group)``) to the problem's fold. A case of fold j is then scored by the
estimator fitted on every fold but j (``estimator.fitted(data)``). Methods whose data agree
(``estimator.data_key()``: a sweep over the ridge penalty, say) share that pass's work.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from tqdm.auto import tqdm

from ..errors import InputError
from ..estimators import Estimator, LearnsAcrossGroups
from ..types import RolloutGroup
from .cases import CaseFile, fold_problems, problem_of

#: folds of problems a cross-fitted method is fitted over (fewer when there are fewer problems)
FOLDS = 10
#: the seed of the fold assignment
SEED = 0


class FitSet:
    """The fits of one cross-fitted method over the folds of a case file's problems (module
    docstring): ``for_case(record)`` is the estimator fitted without the case's fold."""

    def __init__(self, estimator: Estimator, folds: Sequence[Sequence[str]], data: Sequence[Any],
                 fold_of: dict[str, int]):
        self.estimator = estimator
        self.folds = [list(f) for f in folds]
        self.fold_of = fold_of  # problem id -> the fold of its problem
        self.data = list(data)
        self._fitted: dict[int, Estimator] = {}

    def for_case(self, record: dict) -> Estimator:
        """The estimator fitted on every fold but the one of ``record``'s problem."""
        j = self.fold_of[problem_of(record["key"])]
        if j not in self._fitted:
            joined = self.estimator.data(RolloutGroup([]))  # the zero
            for k, d in enumerate(self.data):
                if k != j:
                    joined = joined + d
            self._fitted[j] = self.estimator.fitted(joined)
        return self._fitted[j]

    def describe(self) -> dict:
        """What results files record of the fits: the number of folds, their seed and
        the number of problems in each."""
        return {"folds": len(self.folds), "seed": SEED, "problems": [len(f) for f in self.folds]}


def open_fits(chosen: dict[str, Estimator], layers: dict[str, int], case_file: CaseFile,
              hidden: Callable[[dict, list[int]], dict], group: Callable[[dict, Optional[list]], RolloutGroup], *,
              progress: bool = True) -> dict[str, FitSet]:
    """Method -> its :class:`FitSet` for every method of ``chosen`` that learns across groups
    (module docstring); empty when none does (no pass is made). ``layers``: each
    method's hidden layer; ``hidden(record, layers)`` the hidden states of a case's rollouts
    (layer -> one tensor per rollout) and ``group(record, hidden)`` its RolloutGroup, as
    ``sveb eval`` computes them. Folds: FOLDS seeded folds of the problems (as many as there
    are problems when fewer). An InputError naming the case file names a method whose data fail
    on a case."""
    wanted = {m: est for m, est in chosen.items() if isinstance(est, LearnsAcrossGroups)}
    if not wanted:
        return {}
    records, problem = case_file.records, case_file.problems
    problems = sorted(set(problem.values()))
    folds = fold_problems(problems, min(FOLDS, len(problems)), SEED)
    fold = {p: j for j, members in enumerate(folds) for p in members}
    fold_of = {pid: fold[p] for pid, p in problem.items()}  # problem id -> the fold of its problem
    key_of = {m: (layers.get(m), est.data_key()) for m, est in wanted.items()}
    makers = {}  # data key -> (the first method that computes it, its estimator, its layer)
    for m, est in wanted.items():
        makers.setdefault(key_of[m], (m, est, layers.get(m)))
    data = {key: [est.data(RolloutGroup([])) for _ in folds] for key, (_, est, _) in makers.items()}
    needed = sorted({layer for _, _, layer in makers.values() if layer is not None})
    seen: set[tuple] = set()
    for record in tqdm(records, desc="sveb fits", unit="case", disable=not progress):
        identity = (problem_of(record["key"]), tuple(record["prompt_ids"]),
                    tuple(tuple(r["completion_ids"]) for r in record["rollouts"]))
        if identity in seen:  # the states of one problem share its rollouts: count them once
            continue
        seen.add(identity)
        states = hidden(record, needed) if needed else {}
        j = fold_of[identity[0]]
        for key, (m, est, layer) in makers.items():
            try:
                data[key][j] = data[key][j] + est.data(group(record, None if layer is None else states[layer]))
            except Exception as exc:  # any failure of a method is the method's, named as such
                raise InputError(f"method {m!r} failed on case {record['key']} while fitting: {type(exc).__name__}: "
                                 f"{exc}", path=str(case_file.path), field="methods") from None
    return {m: FitSet(est, folds, data[key_of[m]], fold_of) for m, est in wanted.items()}
