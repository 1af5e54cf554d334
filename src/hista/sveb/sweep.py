"""``sveb sweep`` (SPEC §8): a grid of method specs evaluated on stored cases, with the best
point chosen on one part of the problems and reported on the other.

Reading order:

1. ``parse_grid`` / ``grid_points``   the grid ``key=v1,v2;key2=...`` laid over a base spec
2. ``sweep``                          per case: the hidden states of every layer the points need
                                      from one forward pass, then every point's value at the
                                      state (:func:`hista.sveb.eval.evaluate_case`), appended
                                      to ``OUT/values.jsonl`` at once (a rerun skips those cases)
3. ``summarise``                      per point: MAE, ΔMAE vs GRPO with a paired bootstrap
                                      interval, win rate (:func:`hista.sveb.paired.paired_summary`)
4. ``select``                         the best point on a selection part of the problems (a
                                      seeded split, or K folds), its numbers on the other part
5. ``write_outputs``                  ``sweep.json``, ``sweep.md``, ``heatmap_<p1>_<p2>.png``

A case's problem is its key before ``#`` (``PROBLEM_ID#sK``): the splits never put two states
of one problem on both sides.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
from tqdm.auto import tqdm

from .. import __version__, yamlio
from ..errors import InputError
from ..jsonio import (
    check_not_inputs,
    check_output_dir,
    complete_lines,
    cut_unterminated,
    jsonable,
    loads,
    read_input,
    write_atomic,
    write_json_atomic,
)
from ..models import LoadedModel
from ..schema import Where, is_unit, kind, short
from . import cases
from .cases import fold_problems, problem_of, read_cases, split_problems
from .eval import evaluate_case, open_critics, prepare
from .methods import build_method, build_methods, format_method, parse_method, scalar_text
from .paired import paired_summary
from .present import finite, fmt, new_figure, percent, resampled, save_figure, signed
from .ranks import auroc, rows_of, spearman

__all__ = ["parse_grid", "check_grid", "grid_points", "sweep", "summarise", "select", "write_outputs", "MAX_POINTS"]

VALUES, SWEEP_JSON, SWEEP_MD = "values.jsonl", "sweep.json", "sweep.md"
#: Largest number of grid points a sweep evaluates.
MAX_POINTS = 10_000
#: Fraction of the problems the best point is chosen on, when neither a fraction nor folds are given.
DEFAULT_SELECT_ON = 0.5


# --- 1. the grid ---------------------------------------------------------------------------


def parse_grid(text: str) -> dict[str, list]:
    """The grid ``key=v1,v2,...;key2=...`` (SPEC §8 ``sweep``) as key -> values, in the order
    written; values are YAML scalars (``-1``, ``0.5``, ``1e-4``, ``true``, ``digits``). An
    InputError about ``--grid`` names a part that is not key=values, an empty or repeated key
    or value, a value that is not a scalar, or the reserved key ``label`` (:func:`check_grid`)."""
    if not isinstance(text, str):
        raise InputError(f"a grid is key=v1,v2;key2=v3,..., got {type(text).__name__}", field="--grid")
    grid: dict[str, list] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise InputError(f"{part.strip()!r} is not key=v1,v2,...", field="--grid")
        if key in grid:
            raise InputError(f"key {key!r} is given twice", field="--grid")
        grid[key] = []
        for item in raw.split(","):
            try:
                grid[key].append(yamlio.scalar(item) if item.strip() else [])  # [] : refused below
            except InputError as exc:
                raise InputError(f"key {key!r}: cannot read the value {item.strip()[:40]!r} ({exc.message})",
                                 field="--grid") from None
    return check_grid(grid)


def check_grid(grid: dict) -> dict[str, list]:
    """``grid`` (key -> list of values) when every key is a non-empty name other than ``label``
    with a non-empty list of distinct scalar values (a string, number, boolean or null), else
    an InputError about ``--grid`` naming the key (SPEC §8 ``sweep``)."""
    if not isinstance(grid, dict) or not grid:
        raise InputError("a grid is key=v1,v2;key2=v3,... and this one is empty", field="--grid")
    out: dict[str, list] = {}
    for key, values in grid.items():
        if not isinstance(key, str) or not key:
            raise InputError(f"a key must be a parameter name, got {key!r}", field="--grid")
        if key == "label":
            raise InputError("'label' is not a parameter: grid points are labelled by their values", field="--grid")
        if not isinstance(values, (list, tuple)) or not values:
            raise InputError(f"key {key!r}: expected a non-empty list of values", field="--grid")
        for k, value in enumerate(values):
            if not (value is None or isinstance(value, (str, int, float, bool))):
                raise InputError(f"key {key!r}: value {k + 1} is not a scalar", field="--grid")
            if any(type(value) is type(v) and value == v for v in values[:k]):
                raise InputError(f"key {key!r}: the value {scalar_text(value)!r} is given twice", field="--grid")
        out[key] = list(values)
    return out


def grid_points(base: str, grid: dict[str, list], *, critics: bool = False) -> list[tuple[str, dict]]:
    """The Cartesian product of ``grid`` laid over the method spec ``base`` (which may set
    parameters itself: ``hista-reference``, ``numca?parser=digits``), as (spec, the point's
    grid values) in grid order, the last key varying fastest (SPEC §8 ``sweep``). An
    InputError about ``--grid`` names a key that is not a parameter of the base estimator or
    that the base already sets, and a grid of more than MAX_POINTS points; one about ``--base``
    a base with a label; one naming the method and key a point whose value the estimator
    refuses (``stride=abc``). ``critics``: critic folders were given, so a base that reads a
    trained critic (``ppo-1``, ``ppo-n``) is allowed."""
    name, profile, params, label = parse_method(base)
    if label is not None:
        raise InputError(f"the base {base!r} sets a label; grid points are labelled by their values", field="--base")
    valid = sorted(set(build_methods([base], critics=critics)[base].estimator.config.to_dict()) - {"profile"})
    for key in grid:
        if key not in valid:
            raise InputError(f"key {key!r} is not a parameter of {base!r}; valid: {', '.join(valid)}", field="--grid")
        if key in params:
            raise InputError(f"key {key!r} is already set by the base {base!r}", field="--grid")
    size = math.prod(len(v) for v in grid.values())
    if size > MAX_POINTS:
        raise InputError(f"{size} points; a sweep evaluates at most {MAX_POINTS}", field="--grid")
    points = []
    for combo in itertools.product(*grid.values()):
        point = dict(zip(grid, combo))
        spec = format_method(name, profile, {**params, **point})
        build_method(spec)  # a value the estimator refuses: an InputError naming the point and the key
        points.append((spec, point))
    return points


# --- 2. the sweep --------------------------------------------------------------------------


def sweep(cases_path: Union[str, Path], out: Union[str, Path], *, base: Optional[str] = None,
          grid: Union[str, dict, None] = None, specs: Optional[Sequence[str]] = None,
          folds: Optional[int] = None, select_on: Optional[float] = None, seed: int = 0, n_boot: int = 2000,
          lm: Optional[LoadedModel] = None, device: Optional[str] = None, progress: bool = True,
          critics: Optional[Sequence[Union[str, Path]]] = None) -> dict:
    """Evaluate a grid of method specs on every case of ``cases_path`` (SPEC §8 ``sweep``) and
    write ``out/values.jsonl``, ``out/sweep.json``, ``out/sweep.md`` and the heatmaps.

    The points are ``grid`` (a string for :func:`parse_grid`, or key -> values) over ``base``
    (default ``hista``), or the explicit method ``specs``. Per case the hidden states of every
    layer any point needs come from one forward pass, then every point is evaluated at the
    state; the case's row (as ``sveb eval`` writes it, with every point's value) is appended
    to ``values.jsonl`` at once. A rerun skips the cases already there (after checking that
    the file was written by the same points on cases of the same build: otherwise an
    InputError asks for another ``out``) and loads no model when none is left. The summary is
    computed from the file, so a resumed sweep writes the same ``sweep.json`` as an
    uninterrupted one. Selection (:func:`select`): ``folds`` K-fold by problem, else a
    ``select_on`` fraction of the problems (default 0.5; no selection on a single problem
    unless asked for), seeded by ``seed``. Returns the sweep.json object plus ``paths`` (name
    -> path written). Methods that read a trained critic find it among the ``critics`` folders
    (:func:`hista.sveb.eval.open_critics`); the sweep's header then records them."""
    if specs is not None and (grid is not None or base is not None):
        raise InputError("give either explicit specs or a base and a grid, not both", field="--specs")
    if specs is None:
        if grid is None:
            raise InputError("a sweep needs a grid (or explicit specs)", field="--grid")
        grid = parse_grid(grid) if isinstance(grid, str) else check_grid(grid)
        base = base or "hista"
        points = grid_points(base, grid, critics=bool(critics))
    else:
        points = [(s, None) for s in specs]
        if not points:
            raise InputError("no method specs to sweep", field="--specs")
    spec_list = [s for s, _ in points]
    out = Path(out)
    heatmaps = [heatmap_name(a, b) for a, b in heatmap_pairs(grid)]
    check_not_inputs([out / name for name in (VALUES, SWEEP_JSON, SWEEP_MD, *heatmaps)], [cases_path])
    check_output_dir(out, [VALUES, SWEEP_JSON, SWEEP_MD, *heatmaps])
    records, recorded, revision = read_cases(cases_path)
    chosen = build_methods(spec_list, critics=bool(critics))
    bound = open_critics(chosen, critics, records, recorded, revision, cases_path, device=device)
    problems = sorted({problem_of(r["key"]) for r in records})
    plan = selection_plan(problems, folds=folds, select_on=select_on, seed=seed)

    header = jsonable({"kind": "sweep", "base": base, "grid": grid, "specs": spec_list, "model": recorded,
                       "revision": revision, "settings": records[0]["settings"],
                       **({"critics": {s: c.describe() for s, c in bound.items()}} if bound else {})})
    values_path = out / VALUES
    done = read_values(values_path, header, {r["key"] for r in records})
    todo = [r for r in records if r["key"] not in (done or {})]
    memo: dict = {}
    if todo:  # cross-fitted points are fitted on every case again (deterministic), not only on those left
        setup = prepare(chosen, records, cases_path, recorded, revision, bound=bound, lm=lm, device=device,
                        memo=memo, progress=progress)
        if done is None:
            out.mkdir(parents=True, exist_ok=True)
            cut_unterminated(values_path)  # a header cut short by a crash
            cases.append(values_path, header)
        else:
            cut_unterminated(values_path)  # the header matched: the line a crash cut short goes
    bar = tqdm(total=len(records), initial=len(records) - len(todo), desc="sveb sweep", unit="case",
               disable=not progress)
    for record in todo:
        row = evaluate_case(record, setup, cases_path, memo)
        cases.append(values_path, jsonable({"kind": "case", **row}))
        bar.update(1)
    bar.close()

    stored = read_values(values_path, header, {r["key"] for r in records})
    rows = [stored[r["key"]] for r in records]
    labels = {s: method.label for s, method in chosen.items()}
    result = {
        "hista_version": __version__,
        "cases_file": str(cases_path),
        "settings": records[0]["settings"],
        "base": base,
        "grid": grid,
        "methods": {s: method.record() for s, method in chosen.items()},
        **({"critics": header["critics"]} if bound else {}),
        **summarise(rows, points, labels, n_boot=n_boot, seed=seed),
        "selection": select(rows, spec_list, labels, plan, n_boot=n_boot, seed=seed),
    }
    result["paths"] = write_outputs(result, out)
    return result


def read_values(path: Path, header: dict, keys: set[str]) -> Optional[dict[str, dict]]:
    """The case rows stored in a sweep's values file (case id -> row), or None when the file
    does not exist or holds no header yet. An unterminated last line, left by a crash
    mid-write, is left out (``sweep`` cuts it off once the header matched); an unterminated
    line that is not a JSON record means another file is in the way. An InputError names the
    file and line when the header differs from
    ``header`` (another sweep: use another folder), a case is not one of ``keys``, is there
    twice, or a row is malformed."""
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
    rows: dict[str, dict] = {}
    for number, line in enumerate(lines[1:], start=2):
        row = loads(line, path=str(path), line=number)
        _check_row(row, header["specs"], keys, rows, Where(path, number))
        rows[row["case_id"]] = row
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
    for name in ("target", "group_mean"):
        if not is_unit(row.get(name)):
            where.fail(f"expected a number in [0, 1], got {short(row.get(name))}", name)
    values = row.get("values")
    if not isinstance(values, dict) or set(values) != set(specs):
        where.fail(f"expected a value for each of the {len(specs)} points, got {kind(values)}", "values")
    for spec, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            where.fail(f"expected a number or null, got {short(value)}", f"values.{spec}")


# --- 3. per-point statistics ----------------------------------------------------------------


def _number(x: float) -> Optional[float]:
    """``x``, or None when it is not finite (no ρ for a constant estimate)."""
    return x if math.isfinite(x) else None


def summarise(rows: Sequence[dict], points: Sequence[tuple[str, Optional[dict]]], labels: dict[str, str], *,
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
                    "rho": _number(spearman(row.values, row.targets)),
                    "auroc": _number(auroc(row.values, row.wins, row.losses))})
    grpo = [abs(r["group_mean"] - r["target"]) for r in rows]
    return {"points": out, "grpo_mae": math.fsum(grpo) / len(grpo) if grpo else math.nan, "n_cases": len(rows),
            "n_boot": n_boot, "seed": seed, "resampled": paired["resampled"]}


# --- 4. selection ---------------------------------------------------------------------------


def split_cases(cases_path: Union[str, Path], out: Union[str, Path], *, select_on: float = DEFAULT_SELECT_ON,
                seed: int = 0) -> dict[str, Path]:
    """Write the cases of ``cases_path`` as two case files, ``OUT/selection.jsonl`` and
    ``OUT/report.jsonl``, split by problem exactly as :func:`sweep` splits them with the same
    ``select_on`` and ``seed`` (SPEC §8 ``sweep``): tables of the report part are not selected
    on. Skip records are left out. Returns the two paths."""
    records = [r for r in cases.read(cases_path) if r["kind"] == "case"]
    problems = sorted({problem_of(r["key"]) for r in records})
    plan = selection_plan(problems, folds=None, select_on=select_on, seed=seed)
    if plan["mode"] != "split":
        raise InputError(plan["reason"], path=str(cases_path))
    out = Path(out)
    paths = {part: out / f"{part}.jsonl" for part in ("selection", "report")}
    check_not_inputs(paths.values(), [cases_path])
    check_output_dir(out, [p.name for p in paths.values()])
    out.mkdir(parents=True, exist_ok=True)
    for part, path in paths.items():
        keep = set(plan[part])
        text = "".join(cases.dumps(r) for r in records if problem_of(r["key"]) in keep)
        write_atomic(path, lambda fh, text=text: fh.write(text), kind="jsonl")
    return paths


def selection_plan(problems: Sequence[str], *, folds: Optional[int], select_on: Optional[float],
                   seed: int) -> dict:
    """How the best point is chosen (checked before any case is evaluated): ``{"mode":
    "folds", "folds": [[problems], ...]}`` or ``{"mode": "split", "fraction", "selection",
    "report"}`` (the default, with a fraction of 0.5), or ``{"mode": "none", "reason"}`` when
    neither was asked for and there are fewer than 2 problems. An InputError about ``--folds``
    / ``--select-on`` for a setting the problems cannot serve (fewer than 2 problems, more
    folds than problems, a fraction outside (0, 1))."""
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


def _maes(rows: Sequence[dict], specs: Sequence[str]) -> dict[str, float]:
    """MAE of each spec over the rows where it has a value (NaN where it has none)."""
    out = {}
    for spec in specs:
        errors = [abs(r["values"][spec] - r["target"]) for r in rows if r["values"][spec] is not None]
        out[spec] = math.fsum(errors) / len(errors) if errors else math.nan
    return out


def _best(rows: Sequence[dict], specs: Sequence[str]) -> tuple[Optional[str], float]:
    """The spec of lowest MAE on ``rows`` (the first of equals), and that MAE."""
    maes = _maes(rows, specs)
    finite = [s for s in specs if math.isfinite(maes[s])]
    if not finite:
        return None, math.nan
    best = min(finite, key=lambda s: maes[s])
    return best, maes[best]


def _reported(rows: Sequence[dict], picks: Sequence[Optional[str]], n_boot: int, seed: int) -> dict:
    """Paired statistics of the picked point's value on each row (``picks[i]`` for row i), and
    what its interval resampled."""
    merged = [dict(r, values={"picked": None if p is None else r["values"][p]}) for r, p in zip(rows, picks)]
    paired = paired_summary(merged, ["picked"], n_boot=n_boot, seed=seed)
    cell = paired["rows"]["picked"]["all"]["all"]
    return {"mae": cell["mae"], "grpo_mae": cell["grpo_mae"], "delta_mae": cell["delta"], "delta_lo": cell["lo"],
            "delta_hi": cell["hi"], "win_rate": cell["win"], "tie_rate": cell["tie"], "n": cell["n"],
            "resampled": paired["resampled"]}


def select(rows: Sequence[dict], specs: Sequence[str], labels: dict[str, str], plan: dict, *,
           n_boot: int = 2000, seed: int = 0) -> dict:
    """Choose the best point on one part of the problems and report it on the other (SPEC §8
    ``sweep``). ``plan`` from :func:`selection_plan`:

    - ``split``: the point of lowest MAE on the selection problems' cases is ``picked``; its
      MAE, ΔMAE vs GRPO with the paired 95% interval and win rate on the report problems'
      cases are ``reported`` (with the problems of each part).
    - ``folds``: for each fold, the point of lowest MAE on the other folds is picked and its
      errors on the held-out fold's cases are kept; ``reported`` pools the held-out cases of
      every fold (each case is held out once), ``folds`` says which point each fold picked."""
    problem = [problem_of(r["case_id"]) for r in rows]
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


# --- 5. outputs -----------------------------------------------------------------------------


def heatmap_pairs(grid: Optional[dict]) -> list[tuple[str, str]]:
    """The pairs of grid keys with at least 2 values each, in grid order (one heatmap each)."""
    keys = [k for k, v in (grid or {}).items() if len(v) >= 2]
    return list(itertools.combinations(keys, 2))


def heatmap_name(p1: str, p2: str) -> str:
    """File name of the heatmap of grid keys ``p1`` (rows) and ``p2`` (columns)."""
    return f"heatmap_{p1}_{p2}.png"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _reported_text(rep: dict) -> str:
    return (f"MAE {fmt(rep['mae'])} (GRPO {fmt(rep['grpo_mae'])}), ΔMAE {signed(rep['delta_mae'])} "
            f"[{signed(rep['delta_lo'])}, {signed(rep['delta_hi'])}], win rate {percent(rep['win_rate'])}, "
            f"ties {percent(rep['tie_rate'])}, {_count(rep['n'], 'case')}")


def ranked(points: Sequence[dict]) -> list[dict]:
    """The points sorted by ΔMAE, best (most negative) first, points without one last."""
    return sorted(points, key=lambda p: p["delta_mae"] if finite(p["delta_mae"]) else math.inf)


def summary_text(result: dict, top: int = 5) -> str:
    """What ``sveb sweep`` prints: the points, GRPO's MAE, the ``top`` points by ΔMAE with the
    interval (saying whether it resampled problems or cases) and the selection (SPEC §8 ``sweep``)."""
    lines = [f"{len(result['points'])} points on {_count(result['n_cases'], 'case')}; GRPO MAE "
             f"{fmt(result['grpo_mae'])}; best by ΔMAE vs GRPO [95% interval {resampled(result)}]:"]
    for p in ranked(result["points"])[:top]:
        lines.append(f"  {signed(p['delta_mae'])} [{signed(p['delta_lo'])}, {signed(p['delta_hi'])}]  "
                     f"MAE {fmt(p['mae'])}  win {percent(p['win_rate'])}  {p['label']}")
    return "\n".join(lines) + "\n" + selection_text(result["selection"])


def selection_text(selection: dict) -> str:
    """The selection result in a few lines of markdown (SPEC §8 ``sweep``)."""
    if selection["mode"] == "none":
        return f"No selection: {selection['reason']}.\n"
    rep = selection["reported"]
    if selection["mode"] == "split":
        return (f"Chosen on {_count(len(selection['selection_problems']), 'problem')} "
                f"({_count(selection['selection_cases'], 'case')}, "
                f"fraction {selection['fraction']:g}, seed {selection['seed']}): `{selection['label']}` "
                f"(MAE {fmt(selection['selection_mae'])} there).\n\nOn the other "
                f"{_count(len(selection['report_problems']), 'problem')}: {_reported_text(rep)}.\n")
    lines = [f"{selection['k']}-fold by problem (seed {selection['seed']}): each fold's point is chosen on the "
             "other folds and scored on the fold.", "", "| fold | problems | cases | picked | MAE on the others | "
             "MAE on the fold |", "| --- | --- | --- | --- | --- | --- |"]
    for f in selection["folds"]:
        lines.append(f"| {f['fold']} | {len(f['problems'])} | {f['cases']} | `{f['label']}` | "
                     f"{fmt(f['selection_mae'])} | {fmt(f['held_out_mae'])} |")
    lines += ["", f"Held-out cases pooled: {_reported_text(rep)}.", ""]
    return "\n".join(lines)


def markdown(result: dict, heatmaps: Sequence[str] = ()) -> str:
    """``sweep.md``: the points sorted by ΔMAE vs GRPO (best first; the caption says whether the
    intervals resampled problems or cases), the selection and the heatmaps (SPEC §8 ``sweep``)."""
    keys = list(result["grid"] or {})
    head = [f"`{k}`" for k in keys] if keys else ["method"]
    lines = [
        "# SVEB sweep", "",
        f"{len(result['points'])} points on {result['n_cases']} cases of `{result['cases_file']}`"
        + (f", grid over `{result['base']}`" if keys else "") + f"; GRPO (group mean) MAE {fmt(result['grpo_mae'])}. "
        "ΔMAE = MAE − GRPO MAE on the same cases (negative: better than GRPO), with a paired bootstrap 95% interval "
        f"({result['n_boot']} resamples, seed {result['seed']}) {resampled(result)}; win = cases strictly closer to "
        "the target than GRPO; ρ = Spearman correlation with the Monte-Carlo value, AUROC of a continuation's "
        "success by the state's value (docs/sveb.md \"Rank metrics\").",
        "",
        "| rank | " + " | ".join(head) + " | MAE | ΔMAE [95% interval] | win | tie | ρ | AUROC | n |",
        "| --- | " + " | ".join("---" for _ in head) + " | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rank, p in enumerate(ranked(result["points"]), start=1):
        cells = [scalar_text(p["params"][k]) for k in keys] if keys else [f"`{p['label']}`"]
        lines.append(f"| {rank} | " + " | ".join(cells) + f" | {fmt(p['mae'])} | {signed(p['delta_mae'])} "
                     f"[{signed(p['delta_lo'])}, {signed(p['delta_hi'])}] | {percent(p['win_rate'])} | "
                     f"{percent(p['tie_rate'])} | {fmt(p.get('rho'))} | {fmt(p.get('auroc'))} | {p['n']} |")
    lines += ["", "## Selection", "", selection_text(result["selection"])]
    if heatmaps:
        lines += ["## Heatmaps", ""] + [f"![{name}]({name})\n" for name in heatmaps]
    return "\n".join(lines)


def plot_heatmap(points: Sequence[dict], grid: dict, p1: str, p2: str, path: Union[str, os.PathLike]) -> Path:
    """PNG heatmap of ΔMAE vs GRPO over the values of grid keys ``p1`` (rows) and ``p2``
    (columns), each cell the mean over the points with those values, i.e. averaged over the
    other keys with several values (the title names them); blue is better than GRPO (SPEC §8
    ``sweep``)."""
    rows, cols = grid[p1], grid[p2]
    cells: dict[tuple[int, int], list[float]] = {}
    for p in points:
        i = next(k for k, v in enumerate(rows) if type(v) is type(p["params"][p1]) and v == p["params"][p1])
        j = next(k for k, v in enumerate(cols) if type(v) is type(p["params"][p2]) and v == p["params"][p2])
        if finite(p["delta_mae"]):
            cells.setdefault((i, j), []).append(p["delta_mae"])
    matrix = np.full((len(rows), len(cols)), np.nan)
    for (i, j), ds in cells.items():
        matrix[i, j] = sum(ds) / len(ds)
    extent = float(np.nanmax(np.abs(matrix))) if np.isfinite(matrix).any() else 0.0
    extent = max(extent, 1e-3)  # an all-zero map stays readable
    fig = new_figure(1.2 * len(cols) + 2.6, 0.7 * len(rows) + 1.8)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap="RdBu_r", vmin=-extent, vmax=extent, aspect="auto")
    for (i, j), value in np.ndenumerate(matrix):
        ax.text(j, i, signed(float(value)), ha="center", va="center", fontsize="small")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([scalar_text(v) for v in cols])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([scalar_text(v) for v in rows])
    ax.set_xlabel(p2)
    ax.set_ylabel(p1)
    others = [k for k in grid if k not in (p1, p2) and len(grid[k]) > 1]
    ax.set_title("ΔMAE vs GRPO" + (f"\nmean over {', '.join(others)}" if others else ""), fontsize="medium")
    fig.colorbar(image, ax=ax, label="ΔMAE (negative: better than GRPO)")
    fig.tight_layout()
    return save_figure(fig, Path(path))


def write_outputs(result: dict, out: Union[str, Path]) -> dict[str, Path]:
    """Write ``sweep.json`` (``result``, NaN as null), ``sweep.md`` and a heatmap per pair of
    grid keys with at least 2 values each into ``out`` (SPEC §8 ``sweep``), each atomically;
    returns name -> path."""
    out = Path(out)
    paths = {}
    for p1, p2 in heatmap_pairs(result["grid"]):
        paths[heatmap_name(p1, p2)] = plot_heatmap(result["points"], result["grid"], p1, p2,
                                                   out / heatmap_name(p1, p2))
    paths[SWEEP_JSON] = write_json_atomic(out / SWEEP_JSON, {k: v for k, v in result.items() if k != "paths"})
    text = markdown(result, [name for name in paths if name.startswith("heatmap_")])
    paths[SWEEP_MD] = write_atomic(out / SWEEP_MD, lambda fh: fh.write(text), kind="markdown")
    return paths
