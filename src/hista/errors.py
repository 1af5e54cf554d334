"""Errors for bad user input. The CLI turns them into a one-line message and exit code 2."""

from __future__ import annotations

from typing import Optional


class InputError(ValueError):
    """Bad input from a file or an option, located by file, line and field where known."""

    def __init__(
        self,
        message: str,
        *,
        path: Optional[str] = None,
        line: Optional[int] = None,
        field: Optional[str] = None,
    ) -> None:
        self.path, self.line, self.field, self.message = path, line, field, message
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        what = f"field '{field}': " if field is not None else ""
        super().__init__(f"{where}{what}{message}")
