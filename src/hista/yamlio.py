"""YAML text a user gives hista — recipe files and their overrides, method specs and sweep grids,
methods files, a run's ``recipe.yaml``, settings in environment variables — parsed in one place
(SPEC §11: bad input exits 2 with a located message, never a traceback)."""

from __future__ import annotations

import re
from typing import Any, Optional

import yaml

from .errors import InputError

_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def load(text: str, *, path: Optional[str] = None, line: Optional[int] = None, field: Optional[str] = None,
         what: str = "YAML") -> Any:
    """``yaml.safe_load`` of ``text`` with every failure an InputError naming ``path``, ``line``
    (the YAML error's line when ``line`` is None) and ``field``: bad YAML, an integer
    too long to convert (Python refuses integers of more than 4,300 digits), nesting too deep to
    parse. ``what`` names the text in messages ("the value of trl.seed")."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = line if line is not None or mark is None else mark.line + 1
        raise InputError(f"{what} is not valid YAML: bad YAML ({getattr(exc, 'problem', None) or exc})", path=path,
                         line=at, field=field) from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply", path=path, line=line, field=field) from None
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise InputError(f"{what} holds a number hista cannot read ({exc})", path=path, line=line,
                         field=field) from None


def scalar(raw: str, *, field: Optional[str] = None, what: str = "the value") -> Any:
    """A parameter value of a method spec, a sweep grid or a recipe override, read as a YAML
    scalar: ``-6``, ``0.5``, ``true``, ``digits``; a number in exponent notation
    without a dot (``1e-4``, a string to YAML 1.1) is read as a number too. Failures as
    :func:`load`."""
    if _EXPONENT.fullmatch(raw.strip()):
        try:
            return float(raw)
        except OverflowError:  # pragma: no cover - float("1e999") is inf, not an error
            raise InputError(f"{what} {raw!r} is not a number hista can read", field=field) from None
    return load(raw, field=field, what=what)
