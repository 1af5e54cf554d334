"""Small checks shared by the file schemas hista reads: SVEB's case and results files
(:mod:`hista.sveb.cases`, :mod:`hista.sveb.results`) and the evaluation's results and
per-problem files (:mod:`hista.evaluation.store`). Each failure is an InputError located at the
file, the line where there is one, and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn, Optional, Sequence, Union

from .errors import InputError


class Where:
    """The file (and line) being checked, to raise InputErrors that name it and a field."""

    def __init__(self, path: Path | str, line: Optional[int] = None) -> None:
        self.path, self.line = str(path), line

    def fail(self, message: str, field: Optional[str] = None) -> NoReturn:
        """Raise the InputError of ``message`` about ``field`` here."""
        raise InputError(message, path=self.path, line=self.line, field=field)


def kind(value: Any) -> str:
    """A short name of a JSON value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def short(value: Any) -> str:
    """A JSON value as at most 60 characters, for messages."""
    text = json.dumps(value) if isinstance(value, (dict, list, str)) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_int(value: Any) -> bool:
    """An integer that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_unit(value: Any) -> bool:
    """A JSON number (not a boolean) in [0, 1]; NaN and infinities compare false."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


_TYPE_NAMES = {str: "a string", dict: "an object", list: "a list", int: "an integer", float: "a number"}


def require(obj: dict, name: str, types: Union[type, tuple[type, ...]], where: Where, prefix: str = "",
            what: Optional[str] = None) -> Any:
    """``obj[name]`` when present and of ``types`` (a boolean is never taken for a number),
    else an InputError about ``prefix + name`` saying what was expected (``what``, or the
    types in words) and what came."""
    if name not in obj:
        where.fail("missing", prefix + name)
    value = obj[name]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        what = what or " or ".join(dict.fromkeys(_TYPE_NAMES.get(t, t.__name__) for t in allowed))
        where.fail(f"expected {what}, got {kind(value)}", prefix + name)
    return value


def text(value: Any, field: str, where: Where) -> str:
    """``value`` when it is a non-empty string, else an InputError about ``field``."""
    if not isinstance(value, str):
        where.fail(f"expected a string, got {kind(value)}", field)
    if not value:
        where.fail("must not be empty", field)
    return value


def fields(value: Any, names: Sequence[str], *, what: str, field: str, prefix: str = "",
           required: Optional[Sequence[str]] = None) -> dict:
    """``value`` when it is a dict whose keys are among ``names`` and include ``required``
    (default: all of ``names``), for the checks of stored state. Otherwise an
    InputError: another type names ``field``; a key beyond ``names`` is ``not a field of
    WHAT`` and one of ``required`` that is absent ``missing``, each named ``PREFIX.KEY`` (the
    key alone without ``prefix``)."""
    if not isinstance(value, dict):
        raise InputError(f"expected a mapping of {', '.join(names)}, got {type(value).__name__}", field=field)
    at = (lambda key: f"{prefix}.{key}") if prefix else str
    extra = sorted(map(str, set(value) - set(names)))
    if extra:
        raise InputError(f"not a field of {what}", field=at(extra[0]))
    missing = [key for key in (names if required is None else required) if key not in value]
    if missing:
        raise InputError("missing", field=at(missing[0]))
    return value
