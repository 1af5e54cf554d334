"""Task source ``champ:all|train|test``: CHAMP's competition math problems, offline.

``pip install 'hista[gym]'`` brings ``champ-dataset`` (MIT), whose
``champ_dataset/dataset_files/v0.json`` holds 270 problems (number theory, inequalities,
polynomials, sequences, combinatorics) with final answers. hista reads that file only, found
without importing the package.

CHAMP's answers are free-form ("239", "x=2, y=1", "No", "3 is the only possible value"); the
``math`` verifier (math-verify) can check only some of them. Every answer is checked when the
file loads (:func:`checkable`): it must be a mathematical expression as a whole (no word other
than a function name such as ``sqrt``, or a product of the answer's own one-letter variables
such as ``xy``), math-verify must read it as an expression rather than text, its boxed form
must score 1 and wrong answers 0 (:func:`wrong_answers`: a large number, a number's neighbour,
a system's values unnamed in reverse order). The others (143 of the 270 in v0: yes/no answers, sentences, "..."
patterns) are left out, and a warning says how many, once per process; the 127 kept are the
benchmark.

A record's ``problem`` is CHAMP's text followed by a request for the final answer in
``\\boxed{}``; ``answer`` is CHAMP's answer, ``verifier`` ``math-boxed`` (``math`` reading only a
box or an ``<answer>`` tag: its fallback, the text's last number, pays for unfinished derivations
that happen to end in the answer's digit), ``field`` the category in
lower case (``number-theory``, ...), the id CHAMP's (``P_Combinatorics_1``). ``all`` is every kept
problem in the file's order; ``train`` and ``test`` are a fixed split by position in the file
(every fourth problem of the file, the 4th, 8th, ..., is ``test``: 28 kept problems; 99 are ``train``), so
training on ``champ:train`` and scoring ``champ:test`` never shares a problem. ``n`` takes the
first problems; ``seed`` and the loader's ``split`` are not used.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path
from typing import Any, Optional

from hista.errors import InputError
from hista.jsonio import loads, read_input
from hista.rewards import verify
from hista.rewards.math import to_number
from hista.tasks.base import register
from hista.tasks.parts import PartsSource, packaged_file

logger = logging.getLogger(__name__)

INSTALL = "pip install 'hista[gym]' (champ-dataset==1.0.0, which ships CHAMP's data file)"
#: what follows every problem
ANSWER_TEXT = "\n\nSolve the problem, then give your final answer in \\boxed{}."
#: letter runs an answer may hold besides its own one-letter variables
FUNCTION_NAMES = frozenset({"sqrt", "sin", "cos", "tan", "log", "ln", "exp", "frac", "cdot", "infty", "pi"})
_LETTERS = re.compile(r"[A-Za-z]+")
#: an answer that names two or more values: "x=6, y=5"
_SYSTEM = re.compile(r"[A-Za-z]\s*=[^,=]+(?:,\s*[A-Za-z]\s*=[^,=]+)+")


def data_file() -> Path:
    """CHAMP's data file inside the installed ``champ-dataset`` package (found without importing
    it: its ``__init__`` needs natsort); an InputError saying how to install it otherwise."""
    path = packaged_file("champ_dataset", "dataset_files/v0.json")
    if path is None:
        raise InputError(f"champ: needs CHAMP's data file; {INSTALL}", field="spec")
    return path


def wrong_answers(answer: str) -> list[str]:
    """Wrong answers the ``math`` verifier must refuse for ``answer``: a large number,
    a number's neighbour (a tolerance paid 2001001 for 2001000) and a system's values unnamed and
    reversed (``(5, 6)`` for ``x=6, y=5``)."""
    text = answer.strip().rstrip(".")
    wrong = ["123456789"]
    number = to_number(text)
    if number is not None:
        wrong.append(str(number + 1))
    values = [value.strip() for value in re.findall(r"=([^,]+)", text)] if _SYSTEM.fullmatch(text) else []
    if values != values[::-1]:
        wrong.append("(" + ", ".join(reversed(values)) + ")")
    return wrong


def checkable(answer: str) -> Optional[str]:
    """None when the ``math`` verifier can check ``answer`` (the module docstring), else
    why not."""
    import math_verify as mv

    text = answer.strip().rstrip(".")
    runs = _LETTERS.findall(text)
    variables = {r for r in runs if len(r) == 1}
    words = [w for w in runs if len(w) > 1 and w.lower() not in FUNCTION_NAMES and not set(w) <= variables]
    if words:
        return f"the answer holds words ({', '.join(words[:3])})"
    parsed = mv.parse(f"${text}$", extraction_config=[mv.LatexExtractionConfig(), mv.ExprExtractionConfig()])
    if not parsed or isinstance(parsed[0], str):
        return "math-verify does not read the answer as an expression"
    if verify("math", f"\\boxed{{{text}}}", answer) != 1.0 or any(
            verify("math", f"\\boxed{{{wrong}}}", answer) != 0.0 for wrong in wrong_answers(answer)):
        return "the math verifier does not tell the answer from a wrong one"
    return None


@functools.lru_cache(maxsize=2)
def read_problems(path: Path) -> tuple[tuple[int, dict], ...]:
    """(position in the file, problem) of every checkable problem of the CHAMP data file ``path``
    (§11: a file that is not in its layout is an InputError naming it and the field); a
    warning says how many were left out."""
    data = loads(read_input(path, "CHAMP data file").decode("utf-8"), path=str(path))
    problems = data.get("problems") if isinstance(data, dict) else None
    if not isinstance(problems, dict) or not problems:
        raise InputError("expected an object with a non-empty 'problems' object", path=str(path), field="problems")
    kept, left_out = [], []
    for position, (key, row) in enumerate(problems.items()):
        for name in ("_text", "_answer", "category"):
            if not isinstance(row, dict) or not isinstance(row.get(name), str) or not row[name].strip():
                raise InputError(f"problem {key!r}: expected a non-empty string", path=str(path), field=name)
        (left_out if checkable(row["_answer"]) else kept).append((position, dict(row, identifier=key)))
    if left_out:
        logger.warning("champ: left out %d of %d problems whose answers the math verifier cannot check "
                       "(yes/no, sentences, patterns); %d remain", len(left_out), len(problems), len(kept))
    return tuple(kept)


def _record(row: dict[str, Any]) -> dict:
    return {"id": row["identifier"], "problem": row["_text"].strip() + ANSWER_TEXT, "answer": row["_answer"].strip(),
            "verifier": "math-boxed", "field": row["category"].lower(), "meta": {"source": "CHAMP v0"}}


@register("champ")
class ChampSource(PartsSource):
    """``champ:all|train|test``: CHAMP's problems whose answers math-verify can check."""

    prefix = "champ"
    description = ("CHAMP's competition math problems with checkable answers (pip install 'hista[gym]'); "
                   "all, train or test")

    def data_file(self) -> Path:
        """CHAMP's data file: :func:`data_file`."""
        return data_file()

    def records(self, path: Path) -> list[tuple[int, dict]]:
        """The checkable problems of ``path`` as ``math-boxed`` records, with their positions."""
        return [(position, _record(row)) for position, row in read_problems(path)]
