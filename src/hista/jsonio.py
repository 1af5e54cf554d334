"""JSONL writing that never leaves a half-written file behind."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Iterable


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict]) -> Path:
    """Write ``records`` as JSON lines to a temporary file beside ``path``, then rename it
    into place: readers see the old file or the complete new one, never a partial one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _strict(value):
    """NaN and infinities become null, so the file is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def write_json_atomic(path: str | os.PathLike, data: dict) -> Path:
    """Write ``data`` as indented strict JSON (NaN -> null) through a temporary file and a
    rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(_strict(data), fh, indent=1, ensure_ascii=False, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
