"""The SVEB case file (SPEC §8): one JSON object per line, appended as each case completes.

Each line is either a *case* (``"kind": "case"``) or a *skip* (``"kind": "skip"``: a problem
whose initial accuracy fell outside the difficulty range, recorded so that a rerun does not
sample it again). Both carry the build settings (``settings``), so a rerun can refuse a file
made with different ones. A case holds the problem record, the G initial rollouts (token ids,
text, offsets, reward), the state (rollout index, token position t), the M continuation
rewards and the target (their mean).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from ..errors import InputError

CASE_FIELDS = {"kind": str, "key": str, "settings": dict, "problem": dict, "prompt_ids": list,
               "rollouts": list, "state": dict, "continuations": list, "target": (int, float)}
SKIP_FIELDS = {"kind": str, "key": str, "settings": dict}
ROLLOUT_FIELDS = {"completion_ids": list, "completion_text": str, "offsets": list, "reward": (int, float)}


def dumps(record: dict[str, Any]) -> str:
    """One canonical JSON line (sorted keys, no spaces): same record, same bytes."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def append(path: Path, record: dict[str, Any]) -> None:
    """Append one record with a single write and fsync it, so a crash loses at most the line
    being written (which ``read(..., repair=True)`` then drops)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(dumps(record))
        fh.flush()
        os.fsync(fh.fileno())


def _check(record: Any, path: Path, line: int) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise InputError("expected a JSON object", path=str(path), line=line)
    kind = record.get("kind")
    fields = CASE_FIELDS if kind == "case" else SKIP_FIELDS if kind == "skip" else None
    if fields is None:
        raise InputError(f"unknown record kind {kind!r} (expected 'case' or 'skip')", path=str(path), line=line,
                         field="kind")
    for name, types in fields.items():
        if name not in record:
            raise InputError("missing", path=str(path), line=line, field=name)
        if not isinstance(record[name], types):
            raise InputError(f"wrong type {type(record[name]).__name__}", path=str(path), line=line, field=name)
    if kind == "case":
        for k, rollout in enumerate(record["rollouts"]):
            for name, types in ROLLOUT_FIELDS.items():
                if not isinstance(rollout, dict) or not isinstance(rollout.get(name), types):
                    raise InputError("missing or of the wrong type", path=str(path), line=line,
                                     field=f"rollouts[{k}].{name}")
        state = record["state"]
        if not (isinstance(state.get("rollout"), int) and isinstance(state.get("t"), int)
                and 0 <= state["rollout"] < len(record["rollouts"])
                and 0 <= state["t"] <= len(record["rollouts"][state["rollout"]]["completion_ids"])):
            raise InputError(f"invalid state {state}", path=str(path), line=line, field="state")
        if not record["continuations"]:
            raise InputError("no continuation rewards", path=str(path), line=line, field="continuations")
    return record


def read(path: str | os.PathLike, *, repair: bool = False) -> list[dict[str, Any]]:
    """Read and validate every record of a case file. A bad line raises an InputError naming
    ``file:line`` and the field. With ``repair=True`` (used by ``build`` when resuming its own
    file) an unterminated last line, the trace of a crash mid-write, is cut off instead."""
    path = Path(path)
    if not path.exists():
        return []
    raw = path.read_bytes()
    if repair and raw and not raw.endswith(b"\n"):
        keep = raw.rfind(b"\n") + 1
        with open(path, "r+b") as fh:
            fh.truncate(keep)
        raw = raw[:keep]
    return list(_records(raw.decode("utf-8", errors="replace"), path))


def _records(text: str, path: Path) -> Iterator[dict[str, Any]]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        raise InputError("truncated last line (no newline at the end)", path=str(path), line=len(lines))
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise InputError("empty line", path=str(path), line=number)
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"bad JSON ({exc.msg} at column {exc.colno})", path=str(path), line=number) from None
        yield _check(record, path, number)
