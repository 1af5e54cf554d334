"""Atomic file writing: readers see the old file or the complete new one, never a partial one."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterable


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "w") -> Path:
    """Call ``write(fh)`` on a temporary file beside ``path``, fsync it, then rename it into
    place; on any error the temporary file is removed and ``path`` is untouched. The file gets
    the permissions of any newly created file (0666 minus the umask), not the private mode of
    a temporary file. Every result file goes through here (SPEC §8, §11)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def jsonable(obj: Any) -> Any:
    """``obj`` made strict-JSON ready: NaN and infinities become null, paths strings, tuples
    lists, numpy / torch scalars Python numbers."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):
        return jsonable(obj.item())
    return obj


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict]) -> Path:
    """Write ``records`` as JSON lines, atomically."""
    return write_atomic(path, lambda fh: fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def write_json_atomic(path: str | os.PathLike, data: Any, indent: int = 1) -> Path:
    """Write ``data`` as indented strict JSON (NaN -> null), atomically."""
    text = json.dumps(jsonable(data), indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    return write_atomic(path, lambda fh: fh.write(text))
