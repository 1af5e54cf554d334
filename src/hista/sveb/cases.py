"""The SVEB case file (SPEC §8): one JSON object per line, appended as each case completes.

Each line is either a *case* (``"kind": "case"``) or a *skip* (``"kind": "skip"``: a problem
whose initial accuracy fell outside the difficulty range, recorded so that a rerun does not
sample it again). Both carry the build settings (``settings``), so a rerun can refuse a file
made with different ones. A case holds the problem record, the G initial rollouts (token ids,
text, offsets, reward), the state (rollout index, token position t), the M continuation
rewards and the target (their mean).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import stat
import zlib
from pathlib import Path
from typing import Any, Iterator

from ..errors import InputError
from ..jsonio import append_text, loads
from .schema import Where, is_int, is_unit, kind, require, short, text

#: How far a case's ``target`` may be from the mean of its continuation rewards.
TARGET_TOLERANCE = 1e-9


def dumps(record: dict[str, Any]) -> str:
    """One canonical JSON line (sorted keys, no spaces): same record, same bytes."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def append(path: Path, record: dict[str, Any]) -> None:
    """Append one record with a single write and fsync it, so a crash loses at most the line
    being written (which ``read(..., partial=True)`` then leaves out and :func:`repair` cuts
    off before the next append); only ever to a regular file
    (:func:`hista.jsonio.append_text`, SPEC §11 output files)."""
    append_text(path, dumps(record), "jsonl")


_MAX_TOKEN_ID = 2**31 - 1  # no vocabulary is larger; bigger ints cannot index a model's embeddings


def _text(record: dict, name: str, where: Where, prefix: str = "") -> str:
    return text(require(record, name, str, where, prefix), prefix + name, where)


def _token_ids(value: Any, field: str, where: Where, *, allow_empty: bool = True) -> list[int]:
    if not isinstance(value, list):
        where.fail(f"expected a list of token ids, got {kind(value)}", field)
    if not value and not allow_empty:
        where.fail("must not be empty", field)
    for k, token in enumerate(value):
        if not is_int(token) or not 0 <= token <= _MAX_TOKEN_ID:
            where.fail(f"expected a token id (an integer from 0 to {_MAX_TOKEN_ID}), got {short(token)}",
                       f"{field}[{k}]")
    return value


def _rollout(rollout: Any, k: int, where: Where) -> None:
    prefix = f"rollouts[{k}]."
    if not isinstance(rollout, dict):
        where.fail(f"expected an object, got {kind(rollout)}", f"rollouts[{k}]")
    if "completion_ids" not in rollout:
        where.fail("missing", prefix + "completion_ids")
    ids = _token_ids(rollout["completion_ids"], prefix + "completion_ids", where)
    completion = require(rollout, "completion_text", str, where, prefix)
    offsets = require(rollout, "offsets", list, where, prefix)
    if len(offsets) != len(ids):
        where.fail(f"has {len(offsets)} spans but the completion has {len(ids)} tokens", prefix + "offsets")
    for j, span in enumerate(offsets):
        if not (isinstance(span, list) and len(span) == 2 and all(is_int(x) for x in span)):
            where.fail(f"expected a [start, end] pair of integers, got {short(span)}", f"{prefix}offsets[{j}]")
        start, end = span
        if not 0 <= start <= end <= len(completion):
            where.fail(f"span [{start}, {end}] is not within the completion text (0 <= start <= end <= "
                       f"{len(completion)})", f"{prefix}offsets[{j}]")
    if "reward" not in rollout:
        where.fail("missing", prefix + "reward")
    if not is_unit(rollout["reward"]):
        where.fail(f"expected a number in [0, 1], got {short(rollout['reward'])}", prefix + "reward")


def _check_case(record: dict, where: Where) -> None:
    settings = record["settings"]
    for name in ("model", "revision"):
        require(settings, name, str, where, "settings.")
    require(record, "problem", dict, where)
    field = _text(record, "field", where)
    if field == "all":
        where.fail("'all' is reserved for the pooled column of the report", "field")
    if "prompt_ids" not in record:
        where.fail("missing", "prompt_ids")
    _token_ids(record["prompt_ids"], "prompt_ids", where, allow_empty=False)
    rollouts = require(record, "rollouts", list, where)
    if len(rollouts) < 2:
        where.fail(f"a group needs at least 2 rollouts, got {len(rollouts)}", "rollouts")
    for k, rollout in enumerate(rollouts):
        _rollout(rollout, k, where)

    state = require(record, "state", dict, where)
    i = require(state, "rollout", int, where, "state.")
    if not 0 <= i < len(rollouts):
        where.fail(f"rollout index {i} is not in 0..{len(rollouts) - 1}", "state.rollout")
    t = require(state, "t", int, where, "state.")
    length = len(rollouts[i]["completion_ids"])
    if not 0 <= t <= length:
        where.fail(f"position {t} is not in 0..{length} (the length of rollout {i})", "state.t")

    conts = require(record, "continuations", list, where)
    if not conts:
        where.fail("no continuation rewards", "continuations")
    for k, reward in enumerate(conts):
        if not is_unit(reward):
            where.fail(f"expected a number in [0, 1], got {short(reward)}", f"continuations[{k}]")
    if "target" not in record:
        where.fail("missing", "target")
    target = record["target"]
    if not is_unit(target):
        where.fail(f"expected a number in [0, 1], got {short(target)}", "target")
    mean = math.fsum(conts) / len(conts)
    if abs(target - mean) > TARGET_TOLERANCE:
        where.fail(f"{target!r} is not the mean of the continuation rewards ({mean!r})", "target")


def _check(record: Any, path: Path, line: int) -> dict[str, Any]:
    """``record`` if it is a valid case or skip record (see :func:`read`), else an InputError
    naming ``path:line`` and the first bad field."""
    where = Where(path, line)
    if not isinstance(record, dict):
        where.fail(f"expected a JSON object, got {kind(record)}")
    if "kind" not in record:
        where.fail("missing", "kind")
    what = record["kind"]
    if what not in ("case", "skip"):
        where.fail(f"unknown record kind {short(what)} (expected 'case' or 'skip')", "kind")
    _text(record, "key", where)
    require(record, "settings", dict, where)
    if what == "case":
        _check_case(record, where)
    return record


def read(path: str | os.PathLike, *, partial: bool = False) -> list[dict[str, Any]]:
    """Read and validate every record of a case file (SPEC §8); a missing file has none.

    The file must be UTF-8 JSON lines, each ending in a newline, with strict JSON (no NaN or
    Infinity). Every record has ``kind`` ("case" or "skip"), a non-empty ``key`` that no other
    line repeats, and ``settings`` (an object). A case also has: ``settings.model`` and
    ``settings.revision`` (strings), ``problem`` (an object), ``field`` (a non-empty string
    other than "all"), ``prompt_ids`` (token ids), at least 2 ``rollouts`` each with
    ``completion_ids`` (token ids), ``completion_text``, ``offsets`` (one [start, end] span per
    token, 0 <= start <= end <= len(completion_text)) and ``reward`` in [0, 1]; ``state``
    (``rollout``, an index into rollouts, and ``t``, 0 <= t <= that rollout's length); a
    non-empty list of ``continuations`` rewards in [0, 1], and ``target`` equal to their mean
    (within 1e-9). Numbers are never booleans. The first violation raises an InputError
    naming ``file:line`` and the field (``rollouts[3].offsets[2]``).

    With ``partial=True`` (used by ``build`` when resuming its own file) an unterminated last
    line, the trace of a crash mid-write, is left out, provided it can be the start of one of
    these lines (:func:`complete_part`); the file is not changed (:func:`repair` cuts the line
    off once the caller has checked everything). A path that is not a regular file (a
    directory, a FIFO) is refused without opening it. A name ending in ``.gz`` is read as a
    gzip-compressed case file (how the committed studies store theirs; never partial).
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise InputError(f"cannot read the case file ({exc.strerror or exc})", path=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError("is not a regular file", path=str(path))
    raw = read_bytes(path, repair=False, what="the case file")
    if path.name.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"is not a readable gzip file ({exc})", path=str(path)) from None
    elif partial:
        raw = complete_part(raw, path, "case file")
    return list(_records(raw, path))


def complete_part(raw: bytes, path: Path, what: str) -> bytes:
    """The complete lines of the bytes ``raw`` of an append-only JSON-lines file (SPEC §8, §11):
    an unterminated last line is left out when it can be what a crash mid-write leaves of one
    of this file's lines (it starts with ``{``); anything else at the end (a file that is not
    this command's own: notes, a one-line text) is an InputError naming ``path`` as not
    ``what``, so that it is neither resumed nor cut."""
    keep = raw.rfind(b"\n") + 1
    tail = raw[keep:]
    if tail and not tail.startswith(b"{"):
        raise InputError(f"is not a {what} (its last line is not a JSON record and has no newline): use another "
                         "path", path=str(path), line=raw[:keep].count(b"\n") + 1)
    return raw[:keep]


def repair(path: str | os.PathLike) -> None:
    """Cut an unterminated last line, the trace of a crash mid-write, off an append-only
    JSON-lines file before the next append (SPEC §8 resume), after :func:`complete_part` has
    accepted it; nothing else of the file changes. A file ending in a newline, or none, is left
    as it is."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"cannot read the file to resume it ({exc.strerror or exc})", path=str(path)) from None
    keep = len(complete_part(raw, path, "file this command wrote"))
    if keep < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(keep)


def read_bytes(path: Path, *, repair: bool, what: str) -> bytes:
    """The bytes of an append-only JSON-lines file (SPEC §8: case files, sweep values); with
    ``repair``, an unterminated last line, the trace of a crash mid-write, is cut off the file
    first. An InputError names ``what`` and the file when it cannot be read."""
    try:
        raw = path.read_bytes()
        if repair and raw and not raw.endswith(b"\n"):
            keep = raw.rfind(b"\n") + 1
            with open(path, "r+b") as fh:
                fh.truncate(keep)
            raw = raw[:keep]
    except OSError as exc:
        raise InputError(f"cannot read {what} ({exc.strerror or exc})", path=str(path)) from None
    return raw


def _records(raw: bytes, path: Path) -> Iterator[dict[str, Any]]:
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        raise InputError("truncated last line (no newline at the end)", path=str(path), line=len(lines))
    seen: dict[str, int] = {}
    for number, data in enumerate(lines, start=1):
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 (byte 0x{data[exc.start]:02x} at byte {exc.start + 1} of the line)",
                             path=str(path), line=number) from None
        if not line.strip():
            raise InputError("empty line", path=str(path), line=number)
        record = _check(loads(line, path=str(path), line=number), path, number)
        key = record["key"]
        if key in seen:
            raise InputError(f"key {short(key)} is already used on line {seen[key]}", path=str(path), line=number,
                             field="key")
        seen[key] = number
        yield record
