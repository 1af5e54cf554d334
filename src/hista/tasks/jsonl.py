"""Task source ``jsonl:PATH``: problem records from a local JSON-lines file.

One JSON object per line (blank lines are skipped) with at least ``problem`` (a non-empty
string) and ``answer`` (a string, or a number which is turned into a string).  Optional:
``id`` (string or integer; default ``<file stem>-<line>``), ``verifier`` (any registered
verifier, see :func:`hista.rewards.names`; default ``math``), ``field`` (non-empty string;
default ``default``) and ``meta`` (an object).  Other keys are kept under ``meta``.  The whole
file is validated before anything is returned; the first problem raises
:class:`hista.errors.InputError` naming file, line and field.
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path
from typing import Any, Optional

from hista import rewards
from hista.errors import InputError
from hista.jsonio import loads, read_input
from hista.tasks.base import TaskSource, register

_KNOWN = ("id", "problem", "answer", "verifier", "field", "meta")


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _answer_text(v: Any) -> Optional[str]:
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and math.isfinite(v):
        return str(int(v)) if v.is_integer() else repr(v)
    return None


def parse_record(obj: Any, *, path: str, line: int, stem: str) -> dict:
    """Validate one parsed JSON value and turn it into a problem record."""

    def bad(field: Optional[str], msg: str) -> InputError:
        return InputError(msg, path=path, line=line, field=field)

    if not isinstance(obj, dict):
        raise bad(None, f"expected a JSON object, got {_type_name(obj)}")
    for key in ("problem", "answer"):
        if key not in obj:
            raise bad(key, f"missing required field {key!r}")
    problem = obj["problem"]
    if not isinstance(problem, str) or not problem.strip():
        raise bad("problem", f"must be a non-empty string, got {_type_name(problem)}")
    answer = _answer_text(obj["answer"])
    if answer is None:
        raise bad("answer", f"must be a string or a number, got {_type_name(obj['answer'])}")
    if "id" in obj:
        rid = obj["id"]
        if isinstance(rid, bool) or not isinstance(rid, (str, int)) or rid == "":
            raise bad("id", f"must be a non-empty string or an integer, got {_type_name(rid)}")
        rid = str(rid)
        if "#" in rid:  # SVEB keys its cases PROBLEM_ID#sK: an id holding '#' cannot be a problem id
            raise bad("id", f"must not contain '#' (SVEB case keys are ID#sK), got {rid!r}")
    else:
        rid = f"{stem}-{line}"
    verifier = obj.get("verifier", "math")
    if not isinstance(verifier, str):
        raise bad("verifier", f"must be a string, got {_type_name(verifier)}")
    if verifier not in rewards.names():
        raise bad("verifier", f"unknown verifier {verifier!r}; valid: {', '.join(rewards.names())}")
    field = obj.get("field", "default")
    if not isinstance(field, str) or not field.strip():
        raise bad("field", f"must be a non-empty string, got {_type_name(field)}")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise bad("meta", f"must be a JSON object, got {_type_name(meta)}")
    meta = dict(meta)
    for key, value in obj.items():
        if key not in _KNOWN:
            meta.setdefault(key, value)
    record = {"id": rid, "problem": problem, "answer": answer, "verifier": verifier,
              "field": field}
    if meta:
        record["meta"] = meta
    return record


def read(path: str, n: Optional[int] = None) -> list[dict]:
    """Read and validate every record of a JSONL file; return the first ``n``.

    Raises InputError(path=..., line=..., field=...) on a missing file or one that is not a
    regular file (a FIFO or device is refused at once, never read), undecodable text, bad JSON,
    a non-object line, a missing or wrongly typed field, an id holding ``#``, an unknown
    verifier or a duplicate id.
    """
    if not path:
        raise InputError("jsonl: needs a file path, e.g. jsonl:data/problems.jsonl", field="spec")
    p = Path(os.path.expanduser(path))
    records: list[dict] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(io.BytesIO(read_input(path, "task file")), start=1):
        try:
            text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not valid UTF-8 ({exc.reason})", path=path,
                             line=lineno) from None
        if not text.strip():
            continue
        rec = parse_record(loads(text, path=path, line=lineno), path=path, line=lineno, stem=p.stem)
        if rec["id"] in seen:
            raise InputError(
                f"duplicate id {rec['id']!r} (first used on line {seen[rec['id']]})",
                path=path, line=lineno, field="id",
            )
        seen[rec["id"]] = lineno
        records.append(rec)
    return records if n is None else records[:n]


@register("jsonl")
class JsonlSource(TaskSource):
    """``jsonl:PATH``: the records of a local JSON-lines file, used as they are."""

    description = "a local JSON-lines file of records, jsonl:PATH"

    def load(self, rest: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
        """The first ``n`` records of the file ``rest`` (default all); ``seed`` and ``split``
        do not apply."""
        return read(rest, n)

    def check(self, rest: str) -> None:
        """Read and validate the whole file."""
        read(rest)

    def files(self, rest: str) -> list[Path]:
        """The file ``rest`` (§11: an input no output may overwrite)."""
        return [Path(os.path.expanduser(rest))] if rest else []

    def example(self, tmp_dir: Path) -> str:
        """Write a three-problem file under ``tmp_dir`` and name it."""
        path = Path(tmp_dir) / "example.jsonl"
        rows = [{"problem": "What is 2 + 3?", "answer": "5"},
                {"problem": "Pick the even number.\nA) 3\nB) 4", "answer": "B", "verifier": "choice"},
                {"id": "third", "problem": "What is 7 - 4?", "answer": 3, "field": "subtraction"}]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        return str(path)
