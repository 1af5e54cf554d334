"""The SVEB case file: one JSON object per line, appended as each case completes.

Each line is either a *case* (``"kind": "case"``) or a *skip* (``"kind": "skip"``: a problem
whose initial accuracy fell outside the difficulty range, recorded so that a rerun does not
sample it again). Both carry the build settings (``settings``), so a rerun can refuse a file
made with different ones. A case holds the problem record, the G initial rollouts (token ids,
text, offsets, reward), the state (rollout index, token position t), the M continuation
rewards and the target (their mean).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..errors import InputError
from ..estimators.leakage import without_reward
from ..jsonio import append_text, complete_lines, loads, read_input_unzipped
from ..schema import Where, is_int, is_unit, kind, require, short, text
from ..types import Rollout, RolloutGroup

#: How a case's group is shown to the estimators (docs/sveb.md "Protocols"): ``"leak-free"`` (the
#: default since issue 63) shows the state's own rollout without its reward; ``"paper"`` with it,
#: as the paper's SVEB does.
PROTOCOLS = ("leak-free", "paper")

#: How far a case's ``target`` may be from the mean of its continuation rewards.
TARGET_TOLERANCE = 1e-9


def dumps(record: dict[str, Any]) -> str:
    """One canonical JSON line (sorted keys, no spaces): same record, same bytes."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def append(path: Path, record: dict[str, Any]) -> None:
    """Append one record with a single write and fsync it, so a crash loses at most the line
    being written (which ``read(..., partial=True)`` then leaves out and
    :func:`hista.jsonio.cut_unterminated` cuts off before the next append); only ever to a regular file
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
    """Read and validate every record of a case file; a missing file has none.

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
    these lines (:func:`hista.jsonio.complete_lines`); the file is not changed
    (:func:`hista.jsonio.cut_unterminated` cuts the line off once the caller has checked
    everything). A path that is not a regular file (a
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
    raw = read_input_unzipped(path, "case file")
    if partial and not path.name.endswith(".gz"):
        raw = complete_lines(raw, path, "case file")
    return list(_records(raw, path))


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


# --- problems: keys, splits and folds; reading a case file for evaluation ---------------


def problem_of(case_id: str) -> str:
    """The problem id of a case: its key before ``#`` (``PROBLEM_ID#sK``)."""
    return case_id.partition("#")[0]


def problems_of(records: Sequence[dict]) -> dict[str, str]:
    """Each problem id of the case ``records`` -> its problem: problem ids whose cases
    share a prompt (the same question, drawn twice by a task) are one problem, named by the
    smallest of those ids. Splits, folds and problem-level intervals go by these problems, so
    that no question is on both sides of a split or fit and scored."""
    parent: dict[str, str] = {}  # a problem id -> a smaller id of its problem, or itself

    def root(pid: str) -> str:
        while parent[pid] != pid:
            parent[pid] = parent[parent[pid]]  # path halving: the walks stay short
            pid = parent[pid]
        return pid

    holder: dict[tuple, str] = {}  # a prompt -> the first problem id that asked it
    for record in records:
        pid = problem_of(record["key"])
        parent.setdefault(pid, pid)
        a, b = root(pid), root(holder.setdefault(tuple(record["prompt_ids"]), pid))
        parent[max(a, b)] = min(a, b)  # each root is the smallest id of its problem
    return {pid: root(pid) for pid in parent}


def fold_problems(problems: Sequence[str], k: int, seed: int) -> list[list[str]]:
    """K seeded folds of the problems, as equal in size as they can be (SPEC §8 ``sweep``, and
    the folds of cross-fitted methods); each sorted."""
    order = [sorted(problems)[j] for j in np.random.default_rng(seed).permutation(len(problems))]
    return [sorted(order[j::k]) for j in range(k)]


def split_problems(problems: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """A seeded split of the problems into a selection part of round(fraction · n) problems (at
    least 1, at most n − 1) and a report part (SPEC §8 ``sweep``); both sorted."""
    order = [sorted(problems)[k] for k in np.random.default_rng(seed).permutation(len(problems))]
    n = min(max(1, round(fraction * len(order))), len(order) - 1)
    return sorted(order[:n]), sorted(order[n:])


@dataclasses.dataclass(frozen=True)
class CaseFile:
    """The cases of one file with their provenance: the records (skips left out), the path they
    were read from (which messages name), and the model and revision that built them (which
    hidden states and critics must match)."""

    path: str | Path
    records: list[dict]
    model: str
    revision: str

    @property
    def settings(self) -> dict:
        """The build settings, as recorded (the first case's)."""
        return self.records[0]["settings"]

    @functools.cached_property
    def problems(self) -> dict[str, str]:
        """Each problem id -> its problem (:func:`problems_of`)."""
        return problems_of(self.records)

    def problem(self, record: dict) -> str:
        """The problem of a case record of this file (:func:`problems_of`)."""
        return self.problems[problem_of(record["key"])]


def read_cases(path: str | Path, model: Optional[str] = None) -> CaseFile:
    """The cases of ``path`` for evaluation; an InputError when the file is missing or
    holds no case, mixes models or sampling engines (``settings.engine``), or was built with
    another model than ``model``."""
    if not os.path.lexists(path):
        raise InputError("no such case file", path=str(path))
    records = [r for r in read(path) if r["kind"] == "case"]
    if not records:
        raise InputError("holds no cases", path=str(path))
    built = {(r["settings"]["model"], r["settings"]["revision"]) for r in records}
    if len(built) > 1:
        raise InputError(f"mixes cases of several models: {sorted(built)}", path=str(path))
    (recorded, revision), = built
    engines = [r["settings"].get("engine", "an unrecorded engine (an older build)") for r in records]
    other = next((k for k, e in enumerate(engines) if e != engines[0]), None)
    if other is not None:
        raise InputError(f"mixes cases sampled by several engines: {records[0]['key']!r} by {engines[0]}, "
                         f"{records[other]['key']!r} by {engines[other]} (one file, one engine)", path=str(path),
                         field="settings.engine")
    if model is not None and model != recorded:
        raise InputError(f"cases were built with model '{recorded}', not '{model}': hidden states "
                         "must come from the policy that sampled them", path=str(path))
    return CaseFile(path, records, recorded, revision)


def group_of(record: dict, hidden: Optional[list] = None, *, protocol: str = "paper") -> RolloutGroup:
    """The group of rollouts of a case record: its stored rollouts (ids, text,
    offsets, reward) with ``hidden`` (one tensor per rollout, or None), and the state's stored
    continuation rewards (for estimators that need continuations). ``protocol``: ``"paper"``
    every rollout with its reward, ``"leak-free"`` the state's own rollout without its reward
    (:func:`hista.estimators.leakage.without_reward`), as a baseline for the state may see it."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    prompt, stored = record["prompt_ids"], record["rollouts"]
    hidden = hidden or [None] * len(stored)
    rollouts = [Rollout(prompt, r["completion_ids"], r["reward"], completion_text=r["completion_text"],
                        offsets=[tuple(o) for o in r["offsets"]], hidden=h) for r, h in zip(stored, hidden)]
    state = (record["state"]["rollout"], record["state"]["t"])
    group = RolloutGroup(rollouts, prompt_id=record["key"], problem=record["problem"],
                         continuations={state: list(record["continuations"])})
    return without_reward(group, state[0]) if protocol == "leak-free" else group
