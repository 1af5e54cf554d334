"""The SVEB results file: the JSON object ``sveb eval`` writes and ``sveb report``
reads, checked against its schema on read.

A results file holds ``methods`` (method spec -> estimator configuration), ``labels`` (method
spec -> display name), ``cases`` (one row per case, :class:`hista.sveb.rows.CaseRow`: ``case_id``,
``problem`` (optional: older files lack it), ``field``, ``target``, ``group_mean``,
``continuations``, ``values``, method -> state value or null, and the optional ``state``,
``length``, ``leak`` and ``structure``) and the
``summary`` computed from those rows by :func:`hista.sveb.metrics.summarise`. The summary is a
deterministic function of the rows and of its ``n_boot``, ``seed`` and ``mcs_rows``, so the
report recomputes it (:func:`summarise`) instead of trusting the stored numbers: only the rows
and those three settings need a schema.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Optional

from ..errors import InputError
from ..jsonio import loads
from ..schema import Where, is_int, is_unit, kind, require, short, text
from . import metrics
from .cases import PROTOCOLS
from .rows import CaseRow

__all__ = ["read", "summarise", "MAX_N_BOOT", "MAX_MCS_N", "MAX_VALUE"]

#: Largest ``summary.n_boot`` accepted (the bootstrap's cost grows with it).
MAX_N_BOOT = 1_000_000
#: Largest n of an ``MCS@n`` row accepted.
MAX_MCS_N = 1000
#: Largest magnitude of a stored state value: far beyond any reward, and small enough that
#: sums over any number of cases stay finite.
MAX_VALUE = 1e300
#: How far a row's ``target`` may be from the mean of its continuation rewards.
TARGET_TOLERANCE = 1e-9
_MCS_ROW = re.compile(r"MCS@([1-9][0-9]*)")


def _is_value(value: Any) -> bool:
    """A JSON number (not a boolean) of magnitude at most MAX_VALUE; NaN compares false."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and -MAX_VALUE <= value <= MAX_VALUE


def _mcs(summary: dict, where: Where) -> list[int]:
    """The n of each MCS@n row of the stored summary (default 1, 2, 3)."""
    if "mcs_rows" not in summary:
        return [1, 2, 3]
    rows = summary["mcs_rows"]
    if not isinstance(rows, list):
        where.fail(f"expected a list of 'MCS@n' names, got {kind(rows)}", "summary.mcs_rows")
    out = []
    for k, row in enumerate(rows):
        match = _MCS_ROW.fullmatch(row) if isinstance(row, str) else None
        if match is None or int(match.group(1)) > MAX_MCS_N:
            where.fail(f"expected 'MCS@n' with 1 <= n <= {MAX_MCS_N}, got {short(row)}", f"summary.mcs_rows[{k}]")
        out.append(int(match.group(1)))
    if len(set(out)) != len(out):
        where.fail("names a row twice", "summary.mcs_rows")
    return out


def _row(row: Any, k: int, methods: dict, seen: dict[str, int], where: Where) -> None:
    prefix = f"cases[{k}]."
    if not isinstance(row, dict):
        where.fail(f"expected an object, got {kind(row)}", f"cases[{k}]")
    for name in ("case_id", "field"):
        if name not in row:
            where.fail("missing", prefix + name)
        text(row[name], prefix + name, where)
    if "problem" in row:  # optional (results written before problems were by prompt): the case's problem
        text(row["problem"], prefix + "problem", where)
    case_id = row["case_id"]
    if case_id in seen:
        where.fail(f"case {short(case_id)} is already cases[{seen[case_id]}]", prefix + "case_id")
    seen[case_id] = k
    if row["field"] == "all":
        where.fail("'all' is reserved for the pooled column of the report", prefix + "field")
    for name in ("target", "group_mean"):
        if name not in row:
            where.fail("missing", prefix + name)
        if not is_unit(row[name]):
            where.fail(f"expected a number in [0, 1], got {short(row[name])}", prefix + name)
    conts = require(row, "continuations", list, where, prefix, what="a list of rewards")
    if not conts:
        where.fail("no continuation rewards", prefix + "continuations")
    for j, reward in enumerate(conts):
        if not is_unit(reward):
            where.fail(f"expected a number in [0, 1], got {short(reward)}", f"{prefix}continuations[{j}]")
    mean = math.fsum(conts) / len(conts)
    if abs(row["target"] - mean) > TARGET_TOLERANCE:
        where.fail(f"{row['target']!r} is not the mean of the continuation rewards ({mean!r})", prefix + "target")
    if "length" in row and not (is_int(row["length"]) and row["length"] >= 0):  # optional: completion tokens
        where.fail(f"expected a non-negative integer, got {short(row['length'])}", prefix + "length")
    check_state(row.get("state"), where, prefix + "state")
    if not isinstance(row.get("structure", {}), dict):  # optional: method -> the structure it resolved
        where.fail(f"expected an object (method -> structure), got {kind(row['structure'])}", prefix + "structure")
    values = require(row, "values", dict, where, prefix, what="an object (method -> value)")
    for method in methods:
        if method not in values:
            where.fail("missing", f"{prefix}values.{method}")
        value = values[method]
        if value is not None and not _is_value(value):
            where.fail(f"expected a finite number (|value| <= {MAX_VALUE:g}) or null, got {short(value)}",
                       f"{prefix}values.{method}")
    for method in values:
        if method not in methods:
            where.fail("is not one of the file's methods", f"{prefix}values.{method}")
    leak = row.get("leak", {})  # optional (results written before issue 63): method -> |ΔV| with R_i flipped
    if not isinstance(leak, dict):
        where.fail(f"expected an object (method -> |ΔV|), got {kind(leak)}", prefix + "leak")
    for method, value in leak.items():
        if method not in methods:
            where.fail("is not one of the file's methods", f"{prefix}leak.{method}")
        if value is not None and not (_is_value(value) and value >= 0):
            where.fail(f"expected a non-negative number or null, got {short(value)}", f"{prefix}leak.{method}")


def check_state(state: Any, where: Where, field: str) -> None:
    """A row's optional ``state`` (older files lack it): None, or the rollout and token of the case's
    state, ``{rollout, t}``, non-negative integers."""
    if state is not None and not (isinstance(state, dict) and is_int(state.get("rollout")) and state["rollout"] >= 0
                                  and is_int(state.get("t")) and state["t"] >= 0):
        where.fail(f"expected {{rollout, t}}, non-negative integers, got {short(state)}", field)


def _method_record(record: dict, where: Where, prefix: str) -> None:
    """The optional parts of a method's record (:meth:`hista.sveb.methods.Method.record`)."""
    if "estimator_label" not in record:
        return  # written before results held whole method records: read from the spec
    if not isinstance(record.get("name"), str):
        where.fail(f"expected the estimator name, got {short(record.get('name'))}", f"{prefix}.name")
    if not isinstance(record["estimator_label"], str):
        where.fail(f"expected a string, got {kind(record['estimator_label'])}", f"{prefix}.estimator_label")
    for key in ("labelled", "baseline"):
        if not isinstance(record.get(key, False), bool):
            where.fail(f"expected true or false, got {short(record[key])}", f"{prefix}.{key}")
    critic = record.get("critic")
    if critic is not None and not (isinstance(critic, dict) and isinstance(critic.get("mode"), str)
                                   and _is_value(critic.get("lam"))):
        where.fail(f"expected null or {{mode, lam}}, got {short(critic)}", f"{prefix}.critic")


def _validate(data: Any, where: Where) -> dict[str, Any]:
    if not isinstance(data, dict):
        where.fail(f"expected a JSON object, got {kind(data)}")
    methods = require(data, "methods", dict, where, what="an object (method -> configuration)")
    if not methods:
        where.fail("no methods", "methods")
    for method, config in methods.items():
        if not method:
            where.fail("a method name must not be empty", "methods")
        if not isinstance(config, dict):
            where.fail(f"expected an object (the method's record), got {kind(config)}", f"methods.{method}")
        _method_record(config, where, f"methods.{method}")
    if data.get("protocol", "paper") not in PROTOCOLS:  # optional: results before issue 63 used the paper's
        where.fail(f"expected one of {', '.join(PROTOCOLS)}, got {short(data['protocol'])}", "protocol")
    labels = require(data, "labels", dict, where, what="an object (method -> label)")
    for key, label in labels.items():
        if not isinstance(label, str):
            where.fail(f"expected a string, got {kind(label)}", f"labels.{key}")
    summary = require(data, "summary", dict, where, what="an object")
    n_boot = require(summary, "n_boot", int, where, "summary.", what="an integer")
    if not 1 <= n_boot <= MAX_N_BOOT:
        where.fail(f"expected 1 to {MAX_N_BOOT} resamples, got {n_boot}", "summary.n_boot")
    seed = require(summary, "seed", int, where, "summary.", what="an integer")
    if not 0 <= seed < 2**64:
        where.fail(f"expected an integer from 0 to 2**64 - 1, got {short(seed)}", "summary.seed")
    mcs = _mcs(summary, where)
    for method in methods:
        if method in {f"MCS@{n}" for n in mcs}:
            where.fail("clashes with the name of an MCS@n row", f"methods.{method}")
    rows = require(data, "cases", list, where, what="a list of case rows")
    if not rows:
        where.fail("holds no cases", "cases")
    seen: dict[str, int] = {}
    for k, row in enumerate(rows):
        _row(row, k, methods, seen, where)
    return {**data, "cases": [CaseRow.from_json(row) for row in rows]}


def read(path: str | os.PathLike) -> dict[str, Any]:
    """Read a results file written by ``sveb eval`` and check it against its schema;
    returns the parsed object with its ``cases`` as :class:`hista.sveb.rows.CaseRow` rows.

    The file must be one strict UTF-8 JSON object (no NaN or Infinity) with ``methods``
    (a non-empty object, method spec -> configuration object), ``labels`` (method -> string),
    ``summary`` (an object whose ``n_boot``, 1..MAX_N_BOOT, ``seed``, a non-negative integer,
    and optional ``mcs_rows``, names ``MCS@n``, are what :func:`summarise` reuses) and
    ``cases``, a non-empty list of rows, each with a unique non-empty ``case_id``, a non-empty
    ``field`` other than "all", ``target`` and ``group_mean`` in [0, 1], a non-empty list of
    ``continuations`` in [0, 1] whose mean is the target (within 1e-9), and ``values`` holding
    exactly the file's methods, each a number (|value| <= MAX_VALUE) or null. Numbers are never booleans. A
    missing, unreadable, empty, non-UTF-8, malformed or invalid file raises an InputError
    naming the file and the field (``cases[4].values.hista``).
    """
    path = Path(path)
    where = Where(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        where.fail("does not exist")
    except OSError as exc:
        where.fail(f"cannot read the results file ({exc.strerror or exc})")
    if not stat.S_ISREG(info.st_mode):
        where.fail("is not a regular file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        where.fail(f"cannot read the results file ({exc.strerror or exc})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 (byte 0x{raw[exc.start]:02x})", path=str(path), line=line) from None
    if not text.strip():
        where.fail("is empty (expected the JSON object written by sveb eval)")
    try:
        data = loads(text, path=str(path))
    except InputError:
        try:  # locate the error: the line of a malformed document
            json.loads(text)
            line = None
        except json.JSONDecodeError as exc:
            line = exc.lineno
        except Exception:
            line = None
        data = loads(text, path=str(path), line=line)  # raises, now located at the line
    return _validate(data, where)


def summarise(results: dict[str, Any], *, path: Optional[str | os.PathLike] = None) -> dict:
    """The summary of a results object (as :func:`read` returns it), recomputed from its case
    rows with :func:`hista.sveb.metrics.summarise` and the stored ``n_boot``, ``seed`` and
    ``mcs_rows``. For a file written by ``sveb eval`` it equals the stored summary
    (NaN where the file has null). A row set the metrics cannot handle (an MCS@n too costly to
    enumerate exactly) raises an InputError naming ``path``."""
    summary = results["summary"]
    mcs = _mcs(summary, Where(Path(path or "results")))
    try:
        return metrics.summarise(results["cases"], list(results["methods"]), mcs=mcs, n_boot=summary["n_boot"],
                                 seed=summary["seed"])
    except (ValueError, OverflowError) as exc:
        raise InputError(f"cannot summarise the cases: {exc}", path=None if path is None else str(path),
                         field="cases") from None
