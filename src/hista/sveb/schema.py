"""Small checks shared by the SVEB file schemas (SPEC §8): the case file (:mod:`.cases`) and the
results file (:mod:`.results`). Each failure is an InputError located at the file, the line
where there is one, and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn, Optional

from ..errors import InputError


class Where:
    """The file (and line) being checked, to raise InputErrors that name it and a field."""

    def __init__(self, path: Path | str, line: Optional[int] = None) -> None:
        self.path, self.line = str(path), line

    def fail(self, message: str, field: Optional[str] = None) -> NoReturn:
        """Raise the InputError of ``message`` about ``field`` here (SPEC §8)."""
        raise InputError(message, path=self.path, line=self.line, field=field)


def kind(value: Any) -> str:
    """A short name of a JSON value's type, for messages (SPEC §8)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def short(value: Any) -> str:
    """A JSON value as at most 60 characters, for messages (SPEC §8)."""
    text = json.dumps(value) if isinstance(value, (dict, list, str)) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_int(value: Any) -> bool:
    """An integer that is not a boolean (SPEC §8)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_unit(value: Any) -> bool:
    """A JSON number (not a boolean) in [0, 1]; NaN and infinities compare false (SPEC §8)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
