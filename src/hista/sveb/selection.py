"""Selection in ``sveb sweep``: the best point is chosen on one part of the problems
and reported on the other, a seeded split or K folds by problem, so that its reported numbers
were not selected on. ``sveb split`` writes the two parts of that split as case files.

A case's problem is :func:`hista.sveb.cases.problems_of`'s (its problem id, or the smallest id of
the cases that share its prompt): the parts never put two states of one problem, or one question
drawn twice, on both sides."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence, Union

from ..errors import InputError
from ..jsonio import check_not_inputs, check_output_dir, write_atomic
from . import cases
from .cases import fold_problems, problem_of, problems_of, split_problems
from .metrics import case_problems
from .paired import paired_summary
from .rows import CaseRow

__all__ = ["selection_plan", "select", "split_cases", "DEFAULT_SELECT_ON"]

#: Fraction of the problems the best point is chosen on, when neither a fraction nor folds are given.
DEFAULT_SELECT_ON = 0.5


def split_cases(cases_path: Union[str, Path], out: Union[str, Path], *, select_on: float = DEFAULT_SELECT_ON,
                seed: int = 0) -> dict[str, Path]:
    """Write the cases of ``cases_path`` as ``OUT/selection.jsonl`` and ``OUT/report.jsonl``,
    split by problem exactly as :func:`hista.sveb.sweep.sweep` splits them with the same
    ``select_on`` and ``seed``, so that tables of the report part are not selected on. Skip
    records are left out. Returns the two paths."""
    records = [r for r in cases.read(cases_path) if r["kind"] == "case"]
    problem = problems_of(records)
    plan = selection_plan(sorted(set(problem.values())), folds=None, select_on=select_on, seed=seed)
    if plan["mode"] != "split":
        raise InputError(plan["reason"], path=str(cases_path))
    out = Path(out)
    paths = {part: out / f"{part}.jsonl" for part in ("selection", "report")}
    check_not_inputs(paths.values(), [cases_path])
    check_output_dir(out, [p.name for p in paths.values()])
    out.mkdir(parents=True, exist_ok=True)
    for part, path in paths.items():
        keep = set(plan[part])
        text = "".join(cases.dumps(r) for r in records if problem[problem_of(r["key"])] in keep)
        write_atomic(path, lambda fh, text=text: fh.write(text), kind="jsonl")
    return paths


def selection_plan(problems: Sequence[str], *, folds: Optional[int], select_on: Optional[float],
                   seed: int) -> dict:
    """How the best point is chosen (SPEC §8 ``sweep``), checked before any case is evaluated:
    ``{"mode": "folds", "folds": [[problems], ...]}`` or ``{"mode": "split", "fraction",
    "selection", "report"}`` (the default, with a fraction of 0.5), or ``{"mode": "none",
    "reason"}`` when neither was asked for and there are fewer than 2 problems. An InputError
    about ``--folds`` / ``--select-on`` for a setting the problems cannot serve (fewer than 2
    problems, more folds than problems, a fraction outside (0, 1))."""
    if folds is not None and select_on is not None:
        raise InputError("give --folds or --select-on, not both", field="--folds")
    if len(problems) < 2 and folds is None and select_on is None:
        return {"mode": "none", "seed": seed, "reason": f"the cases hold {len(problems)} problem; choosing a point "
                "on some problems and reporting it on others needs at least 2"}
    if len(problems) < 2:
        raise InputError(f"the cases hold {len(problems)} problem; choosing a point on some problems and reporting "
                         "it on others needs at least 2", field="--folds" if folds else "--select-on")
    if folds is not None:
        if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= len(problems):
            raise InputError(f"expected 2 to {len(problems)} folds (the number of problems), got {folds!r}",
                             field="--folds")
        return {"mode": "folds", "seed": seed, "folds": fold_problems(problems, folds, seed)}
    fraction = DEFAULT_SELECT_ON if select_on is None else select_on
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise InputError(f"expected a fraction of the problems in (0, 1), got {fraction!r}", field="--select-on")
    selection, report = split_problems(problems, fraction, seed)
    return {"mode": "split", "seed": seed, "fraction": fraction, "selection": selection, "report": report}


def _maes(rows: Sequence[CaseRow], specs: Sequence[str]) -> dict[str, float]:
    """MAE of each spec over the rows where it has a value (NaN where it has none)."""
    out = {}
    for spec in specs:
        errors = [abs(r.values[spec] - r.target) for r in rows if r.values[spec] is not None]
        out[spec] = math.fsum(errors) / len(errors) if errors else math.nan
    return out


def _best(rows: Sequence[CaseRow], specs: Sequence[str]) -> tuple[Optional[str], float]:
    """The spec of lowest MAE on ``rows`` (the first of equals), and that MAE."""
    maes = _maes(rows, specs)
    finite = [s for s in specs if math.isfinite(maes[s])]
    if not finite:
        return None, math.nan
    best = min(finite, key=lambda s: maes[s])
    return best, maes[best]


def _reported(rows: Sequence[CaseRow], picks: Sequence[Optional[str]], n_boot: int, seed: int) -> dict:
    """Paired statistics of the picked point's value on each row (``picks[i]`` for row i), and
    what its interval resampled."""
    merged = [r.with_values({"picked": None if p is None else r.values[p]}) for r, p in zip(rows, picks)]
    paired = paired_summary(merged, ["picked"], n_boot=n_boot, seed=seed)
    cell = paired["rows"]["picked"]["all"]["all"]
    return {"mae": cell["mae"], "grpo_mae": cell["grpo_mae"], "delta_mae": cell["delta"], "delta_lo": cell["lo"],
            "delta_hi": cell["hi"], "win_rate": cell["win"], "tie_rate": cell["tie"], "n": cell["n"],
            "resampled": paired["resampled"]}


def select(rows: Sequence[CaseRow], specs: Sequence[str], labels: dict[str, str], plan: dict, *,
           n_boot: int = 2000, seed: int = 0) -> dict:
    """Choose the best point on one part of the problems and report it on the other (SPEC §8
    ``sweep``). ``plan`` from :func:`selection_plan`:

    - ``split``: the point of lowest MAE on the selection problems' cases is ``picked``; its
      MAE, ΔMAE vs GRPO with the paired 95% interval and win rate on the report problems'
      cases are ``reported`` (with the problems of each part).
    - ``folds``: for each fold, the point of lowest MAE on the other folds is picked and its
      errors on the held-out fold's cases are kept; ``reported`` pools the held-out cases of
      every fold (each case is held out once), ``folds`` says which point each fold picked."""
    problem = case_problems(rows)
    if plan["mode"] == "none":
        return dict(plan)
    if plan["mode"] == "split":
        chosen = set(plan["selection"])
        picked, mae = _best([r for r, p in zip(rows, problem) if p in chosen], specs)
        report_rows = [r for r, p in zip(rows, problem) if p not in chosen]
        return {"mode": "split", "fraction": plan["fraction"], "seed": plan["seed"],
                "selection_problems": plan["selection"], "report_problems": plan["report"],
                "picked": picked, "label": labels.get(picked), "selection_mae": mae,
                "selection_cases": len(rows) - len(report_rows),
                "reported": _reported(report_rows, [picked] * len(report_rows), n_boot, seed)}
    folds, held_rows, held_picks = [], [], []
    for j, fold in enumerate(plan["folds"]):
        inside = set(fold)
        picked, mae = _best([r for r, p in zip(rows, problem) if p not in inside], specs)
        held = [r for r, p in zip(rows, problem) if p in inside]
        held_rows += held
        held_picks += [picked] * len(held)
        folds.append({"fold": j, "problems": fold, "cases": len(held), "picked": picked, "label": labels.get(picked),
                      "selection_mae": mae, "held_out_mae": _maes(held, [picked])[picked] if picked else math.nan})
    return {"mode": "folds", "k": len(plan["folds"]), "seed": plan["seed"], "folds": folds,
            "reported": _reported(held_rows, held_picks, n_boot, seed)}
