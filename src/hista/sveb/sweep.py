"""``sveb sweep``: a grid of method specs evaluated on stored cases, with the best
point chosen on one part of the problems and reported on the other.

Reading order:

1. :mod:`hista.sveb.grid`           the points: the grid ``key=v1,v2;key2=...`` laid over a base spec
2. ``sweep``                        per case: the hidden states of every layer the points need
                                    from one forward pass, then every point's value at the
                                    state (:func:`hista.sveb.eval.evaluate_case`), appended
                                    to ``OUT/values.jsonl`` at once (a rerun skips those cases)
3. ``summarise``                    per point: MAE, ΔMAE vs GRPO with a paired bootstrap
                                    interval, win rate (:func:`hista.sveb.paired.paired_summary`)
4. :mod:`hista.sveb.selection`      the best point on a selection part of the problems (a
                                    seeded split, or K folds), its numbers on the other part
5. :mod:`hista.sveb.sweep_outputs`  ``sweep.json``, ``sweep.md``, ``heatmap_<p1>_<p2>.png``
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from tqdm.auto import tqdm

from .. import __version__, provenance
from ..errors import InputError
from ..jsonio import check_not_inputs, check_output_dir, complete_lines, cut_unterminated, jsonable, loads, read_input
from ..models import LoadedModel
from ..schema import Where, is_unit, kind, short
from . import cases
from .cases import CaseFile, read_cases
from .eval import Setup, evaluate_case, open_critics, prepare
from .grid import check_grid, grid_points, parse_grid
from .methods import build_methods
from .metrics import grpo_mae
from .paired import paired_summary
from .ranks import auroc, rows_of, spearman
from .results import check_state
from .rows import CaseRow
from .selection import select, selection_plan
from .sweep_outputs import output_names, write_outputs

__all__ = ["sweep", "read_values", "summarise", "VALUES"]

#: The values file in a sweep's folder: a header, then one row per case as it is evaluated.
VALUES = "values.jsonl"


def sweep(cases_path: Union[str, Path], out: Union[str, Path], *, base: Optional[str] = None,
          grid: Union[str, dict, None] = None, specs: Optional[Sequence[str]] = None,
          folds: Optional[int] = None, select_on: Optional[float] = None, seed: int = 0, n_boot: int = 2000,
          lm: Optional[LoadedModel] = None, device: Optional[str] = None, progress: bool = True,
          critics: Optional[Sequence[Union[str, Path]]] = None, protocol: str = "leak-free") -> dict:
    """Evaluate the points of ``grid`` (a string or key -> values) over ``base`` (default ``hista``),
    or the method ``specs``, on every case of ``cases_path``; write ``out/values.jsonl``,
    ``sweep.json``, ``sweep.md`` and the heatmaps; return the sweep.json object plus ``paths``.

    Each case's row (as ``sveb eval`` writes it) is appended to ``values.jsonl`` at once. A rerun
    skips the cases there (refusing another sweep's file) and loads no model when none is left;
    the summary is read back from the file, so a resumed sweep writes the same ``sweep.json``.
    ``protocol``: how each case's group is shown to the points (:func:`hista.sveb.eval.evaluate`).
    The best point is chosen by ``folds`` (K-fold by problem) or on a ``select_on`` fraction of
    the problems, seeded by ``seed`` (:mod:`hista.sveb.selection`). Methods that read a trained
    critic find it among the ``critics`` folders, which the header then records."""
    base, grid, points = _points(base, grid, specs, critics=bool(critics))
    spec_list = [s for s, _ in points]
    out = Path(out)
    _check_outputs(out, grid, cases_path)
    case_file = read_cases(cases_path)
    records = case_file.records
    chosen = build_methods(spec_list, critics=bool(critics))
    bound = open_critics(chosen, critics, case_file, device=device)
    plan = selection_plan(sorted(set(case_file.problems.values())), folds=folds, select_on=select_on, seed=seed)
    header = _header(base, grid, spec_list, case_file, bound, protocol)

    values_path, keys = out / VALUES, {r["key"] for r in records}
    done = read_values(values_path, header, keys)
    todo = [r for r in records if r["key"] not in (done or {})]
    setup = None
    if todo:  # cross-fitted points are fitted on every case again (deterministic), not only on those left
        setup = prepare(chosen, case_file, bound=bound, lm=lm, device=device, todo=todo, progress=progress,
                        protocol=protocol)
        _start_values(values_path, header, fresh=done is None)
    try:
        _append_rows(values_path, todo, setup, total=len(records), progress=progress)
    finally:
        if setup is not None:
            setup.states.close()
    stored = read_values(values_path, header, keys)

    rows = [dataclasses.replace(stored[r["key"]], problem=case_file.problem(r)) for r in records]  # old rows lack it
    labels = {s: method.label for s, method in chosen.items()}
    result = {"hista_version": __version__, "code": provenance.code(), "cases_file": str(cases_path),
              "protocol": protocol,
              "settings": case_file.settings, "base": base, "grid": grid,
              "methods": {s: method.record() for s, method in chosen.items()},
              **({"critics": header["critics"]} if bound else {}),
              **summarise(rows, points, labels, n_boot=n_boot, seed=seed),
              "selection": select(rows, spec_list, labels, plan, n_boot=n_boot, seed=seed)}
    result["paths"] = write_outputs(result, out)
    return result


def _points(base: Optional[str], grid: Union[str, dict, None], specs: Optional[Sequence[str]], *,
            critics: bool) -> tuple[Optional[str], Optional[dict], list[tuple[str, Optional[dict]]]]:
    """The base, the checked grid and the points (spec, grid values) of a sweep's arguments, or of
    its explicit specs (then without a base or grid), refused before any file is read."""
    if specs is not None and (grid is not None or base is not None):
        raise InputError("give either explicit specs or a base and a grid, not both", field="--specs")
    if specs is not None:
        points = [(s, None) for s in specs]
        if not points:
            raise InputError("no method specs to sweep", field="--specs")
        return None, None, points
    if grid is None:
        raise InputError("a sweep needs a grid (or explicit specs)", field="--grid")
    grid = parse_grid(grid) if isinstance(grid, str) else check_grid(grid)
    base = base or "hista"
    return base, grid, grid_points(base, grid, critics=critics)


def _check_outputs(out: Path, grid: Optional[dict], cases_path: Union[str, Path]) -> None:
    """Refuse, before any work, an ``out`` whose files would overwrite the cases or hold others' files."""
    names = [VALUES, *output_names(grid)]
    check_not_inputs([out / name for name in names], [cases_path])
    check_output_dir(out, names)


def _header(base: Optional[str], grid: Optional[dict], specs: list[str], case_file: CaseFile, bound: dict,
            protocol: str) -> dict:
    """The values file's first line: what its rows were computed with, so that only the same sweep resumes it
    (the protocol is left out for ``"paper"``, so that a sweep made before issue 63 resumes under it)."""
    return jsonable({"kind": "sweep", "base": base, "grid": grid, "specs": specs, "model": case_file.model,
                     "revision": case_file.revision, "settings": case_file.settings,
                     **({"protocol": protocol} if protocol != "paper" else {}),
                     **({"critics": {s: c.describe() for s, c in bound.items()}} if bound else {})})


def _start_values(path: Path, header: dict, *, fresh: bool) -> None:
    """Make the values file ready for appending: a new one gets ``header``; a line a crash cut short goes."""
    if fresh:
        path.parent.mkdir(parents=True, exist_ok=True)
        cut_unterminated(path)  # a header cut short by a crash
        cases.append(path, header)
    else:
        cut_unterminated(path)  # the header matched: the line a crash cut short goes


def _append_rows(path: Path, todo: Sequence[dict], setup: Optional[Setup], *, total: int, progress: bool) -> None:
    """Evaluate every point on each case of ``todo`` and append its row at once, so that a killed sweep resumes."""
    bar = tqdm(total=total, initial=total - len(todo), desc="sveb sweep", unit="case", disable=not progress)
    for record in todo:
        row = evaluate_case(record, setup)
        cases.append(path, jsonable({"kind": "case", **row.to_json()}))
        bar.update(1)
    bar.close()


def read_values(path: Path, header: dict, keys: set[str]) -> Optional[dict[str, CaseRow]]:
    """The case rows of a sweep's values file (case id -> row), the cases a rerun skips; None when
    the file does not exist or holds no header yet. A last line cut short by a crash is left out
    (``sweep`` cuts it off once the header matched). An InputError names the file and line of
    another sweep's header (use another folder), a case not among ``keys`` or there twice, or a
    malformed row."""
    if not path.exists():
        return None
    raw = complete_lines(read_input(path, "sweep's values file"), path, "sweep's values file")
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 (byte 0x{raw[exc.start]:02x})", path=str(path),
                         line=raw[: exc.start].count(b"\n") + 1) from None
    if not lines:
        return None
    stored = loads(lines[0], path=str(path), line=1)
    if stored != header:
        differs = sorted(k for k in header if not isinstance(stored, dict) or stored.get(k) != header[k])
        raise InputError(f"was written by another sweep (its {', '.join(differs) or 'header'} differ); use another "
                         "--out, or remove the folder to start again", path=str(path), line=1)
    rows: dict[str, CaseRow] = {}
    for number, line in enumerate(lines[1:], start=2):
        row = loads(line, path=str(path), line=number)
        _check_row(row, header["specs"], keys, rows, Where(path, number))
        rows[row["case_id"]] = CaseRow.from_json(row)
    return rows


def _check_row(row: Any, specs: list[str], keys: set[str], seen: dict, where: Where) -> None:
    """A stored case row: one of this sweep's cases, once, with a value (or null) per point."""
    if not isinstance(row, dict) or row.get("kind") != "case":
        where.fail(f"expected a case row, got {short(row)}")
    case_id = row.get("case_id")
    if case_id not in keys:
        where.fail(f"case {short(case_id)} is not in the cases file: use another --out", "case_id")
    if case_id in seen:
        where.fail(f"case {short(case_id)} is there twice", "case_id")
    if not isinstance(row.get("field"), str):
        where.fail(f"expected the case's field, got {short(row.get('field'))}", "field")
    for name in ("target", "group_mean"):
        if not is_unit(row.get(name)):
            where.fail(f"expected a number in [0, 1], got {short(row.get(name))}", name)
    check_state(row.get("state"), where, "state")
    conts = row.get("continuations")
    if not isinstance(conts, list) or not conts or not all(is_unit(c) for c in conts):
        where.fail(f"expected a non-empty list of rewards in [0, 1], got {short(conts)}", "continuations")
    values = row.get("values")
    if not isinstance(values, dict) or set(values) != set(specs):
        where.fail(f"expected a value for each of the {len(specs)} points, got {kind(values)}", "values")
    for spec, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            where.fail(f"expected a number or null, got {short(value)}", f"values.{spec}")


# --- 3. per-point statistics ----------------------------------------------------------------


def _finite_or_none(x: float) -> Optional[float]:
    """``x``, or None when it is not finite (no ρ for a constant estimate)."""
    return x if math.isfinite(x) else None


def summarise(rows: Sequence[CaseRow], points: Sequence[tuple[str, Optional[dict]]], labels: dict[str, str], *,
              n_boot: int = 2000, seed: int = 0) -> dict:
    """Per point (SPEC §8 ``sweep``): ``spec``, ``label``, ``params`` (its grid values), ``mae``,
    ``delta_mae`` = MAE − GRPO MAE on the same cases (GRPO: the row's group mean) with
    ``delta_lo``/``delta_hi`` its paired percentile bootstrap 95% interval (the same resampled
    cases for the point and for GRPO, :func:`hista.sveb.paired.paired_summary`), ``win_rate``
    and ``tie_rate`` (cases strictly closer to the target than GRPO / as close), ``n`` cases
    used and ``skipped``, ``rho`` and ``auroc`` (:mod:`hista.sveb.ranks`, point values; None when undefined). Also
    ``grpo_mae`` over every case, ``n_cases``, ``n_boot``, ``seed``, and ``resampled``:
    ``"problems"`` when cases share a problem and the intervals resample problems, else ``"cases"``."""
    specs = [s for s, _ in points]
    paired = paired_summary(rows, specs, n_boot=n_boot, seed=seed)
    scored = rows_of(rows, specs, mcs=())
    out = []
    for spec, params in points:
        cell, row = paired["rows"][spec]["all"]["all"], scored[spec]
        out.append({"spec": spec, "label": labels[spec], "params": params, "mae": cell["mae"],
                    "delta_mae": cell["delta"], "delta_lo": cell["lo"], "delta_hi": cell["hi"],
                    "win_rate": cell["win"], "tie_rate": cell["tie"], "n": cell["n"], "skipped": cell["skipped"],
                    "rho": _finite_or_none(spearman(row.values, row.targets)),
                    "auroc": _finite_or_none(auroc(row.values, row.wins, row.losses))})
    return {"points": out, "grpo_mae": grpo_mae(rows), "n_cases": len(rows),
            "n_boot": n_boot, "seed": seed, "resampled": paired["resampled"]}
