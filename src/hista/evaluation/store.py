"""The per-problem file of an evaluation: append-only JSON lines beside the results.

``results.json`` has a companion ``results.samples.jsonl`` written as the evaluation goes. Its
first line is the header ``{"kind": "settings", "settings": {...}}``; every other line is one
finished problem::

    {"kind": "problem", "key": "BENCHMARK/ID", "benchmark", "category", "id", "problem", "answer",
     "verifier", "samples": [{"text", "tokens", "truncated", "reward", "reason"}, ...]}

A rerun reads the file, refuses it when its settings differ from the rerun's (naming the
fields), and evaluates only the problems it lacks; a line cut short by a crash is dropped
(the problem is evaluated again), but only once the file has been identified as a per-problem
file and the rerun has passed every check. Records are canonical JSON (sorted keys), so that a resumed
evaluation writes what an uninterrupted one writes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Iterable, Optional

from ..errors import InputError
from ..jsonio import append_jsonl, loads, read_input
from ..schema import Where, is_int, is_unit, require, short, text


def samples_path(out: str | os.PathLike) -> Path:
    """The per-problem file of the results file ``out``: ``X.samples.jsonl`` for ``X.json``."""
    out = Path(out)
    return out.with_suffix(".samples.jsonl") if out.suffix == ".json" else out.with_name(out.name + ".samples.jsonl")


def differences(old: Any, new: Any, prefix: str = "", sides: tuple[str, str] = ("there", "here")) -> list[str]:
    """The dotted names of the fields where two settings differ (``benchmarks[1].temperature``),
    each with both values labelled by ``sides``, for messages."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(old.keys() | new.keys()):
            name = f"{prefix}.{key}" if prefix else str(key)
            out += differences(old.get(key), new.get(key), name, sides)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for k, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{prefix}[{k}]", sides)]
    return [] if old == new else [f"{prefix} ({short(old)} {sides[0]}, {short(new)} {sides[1]})"]


def check_settings(stored: dict, current: dict, where: Where, what: str) -> None:
    """Refuse ``stored`` settings that differ from ``current``: an InputError at
    ``where`` whose field is the first differing one and whose message lists them all."""
    diff = differences(stored, current)
    if diff:
        where.fail(f"{what} with other settings: {'; '.join(diff)}. Rerun with the same settings to resume, "
                   "or give another --out", diff[0].split(" (")[0])


def _sample(sample: Any, k: int, where: Where, prefix: str = "") -> None:
    field = f"{prefix}samples[{k}]"
    if not isinstance(sample, dict):
        where.fail(f"expected an object, got {short(sample)}", field)
    require(sample, "text", str, where, field + ".")
    require(sample, "reason", str, where, field + ".")
    require(sample, "truncated", bool, where, field + ".")
    if not is_int(require(sample, "tokens", int, where, field + ".")) or sample["tokens"] < 0:
        where.fail(f"expected an integer >= 0, got {short(sample['tokens'])}", field + ".tokens")
    if not is_unit(require(sample, "reward", (int, float), where, field + ".", what="a number")):
        where.fail(f"expected a reward in [0, 1], got {short(sample['reward'])}", field + ".reward")


def check_problem(record: Any, where: Where, prefix: str = "") -> dict:
    """``record`` when it is a well-formed problem record (module docstring: key, benchmark,
    category, verifier, problem and samples, each sample with text, reason, truncated, tokens
    >= 0 and a reward in [0, 1]), else an InputError at ``where`` naming the field, after
    ``prefix`` (``problems[3].`` in a results file). The one check of a problem
    record: the per-problem file, ``hista eval merge`` and ``hista eval compare`` all use it."""
    if not isinstance(record, dict):
        where.fail(f"expected a problem record (an object), got {short(record)}", prefix[:-1] or None)
    for name in ("key", "benchmark", "category", "verifier"):
        text(require(record, name, str, where, prefix), prefix + name, where)
    require(record, "problem", str, where, prefix)
    samples = require(record, "samples", list, where, prefix)
    if not samples:
        where.fail("must hold at least one sample", prefix + "samples")
    for k, sample in enumerate(samples):
        _sample(sample, k, where, prefix)
    return record


#: How the settings header of a per-problem file begins (canonical JSON: sorted keys).
HEADER_START = b'{"hista_version":'


def read(path: str | os.PathLike) -> tuple[Optional[dict], list[dict]]:
    """The settings header and the problem records of a per-problem file; a missing or
    empty file has neither. The file is only read, never changed: an unterminated last line, a
    crash's trace, is left out (:func:`hista.jsonio.cut_unterminated` cuts it off once the evaluation has
    passed every check). The file is identified first: an InputError names the file, line and
    field of anything that is wrong, an unterminated first line that is not the beginning of a
    settings header included (a file this is not), and so are lines that are not UTF-8 JSON,
    a first line that is not the settings header, a record that misses a field or repeats a
    key."""
    path = Path(path)
    if not _exists(path):
        return None, []
    lines = _identified_lines(path)
    return _records(path, lines)


def _exists(path: Path) -> bool:
    """Whether the per-problem file is there; an InputError when it cannot be read or is not a
    regular file."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise InputError(f"cannot read the per-problem file ({exc.strerror or exc})", path=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError("is not a regular file", path=str(path))
    return True


def _identified_lines(path: Path) -> list[bytes]:
    """The file's lines (the last one unterminated, maybe empty), refused when an unterminated
    first or last line shows that this is not a per-problem file."""
    raw = read_input(path, "per-problem file")
    lines = raw.split(b"\n")
    if len(lines) == 1 and raw and not (raw.startswith(HEADER_START) or HEADER_START.startswith(raw)):
        Where(path, 1).fail("the first line must be the settings header {\"kind\": \"settings\", \"settings\": "
                            "{...}} (and it has no newline at its end); is this a hista eval per-problem file?",
                            "kind")
    if len(lines) > 1 and lines[-1] and not lines[-1].startswith(b"{"):
        Where(path, len(lines)).fail("not a JSON record, and it has no newline at its end: is this a hista eval "
                                     "per-problem file?")
    return lines


def _records(path: Path, lines: list[bytes]) -> tuple[Optional[dict], list[dict]]:
    """The header and the checked problem records of the terminated ``lines``."""
    header, records, seen = None, [], {}
    for number, data in enumerate(lines[:-1], start=1):
        where = Where(path, number)
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError:
            where.fail("not UTF-8")
        record = loads(line, path=str(path), line=number)
        if not isinstance(record, dict):
            where.fail(f"expected a JSON object, got {short(record)}")
        kind = record.get("kind")
        if number == 1:
            if kind != "settings" or not isinstance(record.get("settings"), dict):
                where.fail("the first line must be the settings header {\"kind\": \"settings\", \"settings\": {...}}; "
                           "is this a hista eval per-problem file?", "kind")
            header = record
            continue
        if kind != "problem":
            where.fail(f"expected \"problem\", got {short(kind)}", "kind")
        check_problem(record, where)
        if record["key"] in seen:
            where.fail(f"key {short(record['key'])} is already used on line {seen[record['key']]}", "key")
        seen[record["key"]] = number
        records.append(record)
    return header, records


def append(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Append finished problem records (or the header) to the per-problem file with one write
    and an fsync (:func:`hista.jsonio.append_jsonl`)."""
    append_jsonl(path, records)
