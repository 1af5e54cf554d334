"""The grid of ``sveb sweep``: ``key=v1,v2;key2=...`` read into key -> values, checked,
and laid over a base method spec as the sweep's points."""

from __future__ import annotations

import itertools
import math

from .. import yamlio
from ..errors import InputError
from .methods import build_method, build_methods, format_method, parse_method, scalar_text

__all__ = ["parse_grid", "check_grid", "grid_points", "MAX_POINTS"]

#: Largest number of grid points a sweep evaluates.
MAX_POINTS = 10_000


def parse_grid(text: str) -> dict[str, list]:
    """The grid ``key=v1,v2,...;key2=...`` as key -> values, in the order written; values are
    YAML scalars (``-1``, ``0.5``, ``1e-4``, ``true``, ``digits``), checked by :func:`check_grid`.
    A part that is not key=values is an InputError about ``--grid``."""
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
    """``grid`` when every key is a parameter name other than ``label`` with a non-empty list of
    distinct scalars, else an InputError about ``--grid`` naming the key: the grid may come from
    Python as well as from the command line."""
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
    parameters itself: ``hista-reference``, ``numca?parser=digits``), as (spec, the point's grid
    values) in grid order, the last key varying fastest. Every point is built once here, so that
    a key the base estimator lacks or already sets, a base with a label, more than MAX_POINTS
    points or a value the estimator refuses is an InputError before any case is read.
    ``critics``: critic folders were given, so a base that reads a trained critic (``ppo-1``,
    ``ppo-n``) is allowed."""
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
