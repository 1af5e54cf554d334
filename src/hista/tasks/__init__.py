"""Problem sources: built-in generators, local JSONL and Hugging Face datasets (SPEC §7).

A problem record is a dict ``{"id", "problem", "answer", "verifier", "field"}`` (plus an
optional ``"meta"`` dict); ``verifier`` is one of ``math``, ``choice``, ``code`` and ``field`` is
the category label SVEB reports by.  Sources are named by a spec string:

* ``builtin:NAME[?k=v&k=v]``: a seeded generator (``arith``, ``choice``), see :func:`list_builtin`;
* ``jsonl:PATH``: one JSON object per line, see :mod:`hista.tasks.jsonl`;
* ``hf:NAME[:CONFIG][@SPLIT]``: a Hugging Face dataset, see :mod:`hista.tasks.hf`.
"""

from __future__ import annotations

from typing import Optional

from hista.errors import InputError
from hista.tasks import arith, choice
from hista.tasks import hf as _hf
from hista.tasks import jsonl as _jsonl
from hista.tasks._common import check_count, check_seed
from hista.tasks.filter import filter_by_accuracy

__all__ = ["load", "check_spec", "list_builtin", "preview", "filter_by_accuracy", "PREFIXES", "BUILTINS"]

#: Built-in generators by name; each module has NAME, DESCRIPTION, KNOBS and load().
BUILTINS = {arith.NAME: arith, choice.NAME: choice}
#: Valid source prefixes.
PREFIXES = ("builtin:", "jsonl:", "hf:")


def _known_sources() -> str:
    names = ", ".join(f"builtin:{k}" for k in BUILTINS)
    return f"valid prefixes: {', '.join(PREFIXES)}; built-in tasks: {names}"


def load(spec: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
    """Load problem records from a source spec (SPEC §7).

    ``n``: how many (built-ins generate ``n``, default 1000; files and datasets return their
    first ``n`` rows, default all).  ``seed`` and ``split`` (``train``, ``test``,
    ``validation``) drive the built-in generators; for ``hf:`` ``split`` is the dataset split
    unless the spec names one with ``@SPLIT``; a ``jsonl:`` file is used as it is.
    Raises :class:`hista.errors.InputError` for any bad spec, option or input file.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"empty task spec; {_known_sources()}", field="spec")
    spec = spec.strip()
    prefix, sep, rest = spec.partition(":")
    prefix = prefix.lower() + sep
    if prefix == "builtin:":
        name, _, query = rest.partition("?")
        module = BUILTINS.get(name.strip())
        if module is None:
            raise InputError(
                f"unknown built-in task {name!r} in {spec!r}; built-in tasks: "
                f"{', '.join(BUILTINS)}", field="spec")
        return module.load(spec, query, n=n, seed=seed, split=split)
    if prefix == "jsonl:":
        return _jsonl.load(rest.strip(), n=check_count(n, 0) if n is not None else None)
    if prefix == "hf:":
        check_seed(seed)
        if not isinstance(split, str) or not split:
            raise InputError(f"split must be a non-empty string, got {split!r}", field="split")
        return _hf.load(rest.strip(), n=check_count(n, 0) if n is not None else None,
                        split=split)
    hint = ""
    if spec.split("?")[0] in BUILTINS:
        hint = f" (did you mean builtin:{spec}?)"
    raise InputError(f"unknown task source {spec!r}{hint}; {_known_sources()}", field="spec")


def check_spec(spec: str) -> None:
    """Check a source spec without downloading anything (SPEC §7): built-ins generate one
    problem, ``jsonl:`` files must exist, ``hf:`` names must parse and be a supported
    dataset or an ``owner/name`` id. Raises InputError."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"empty task spec; {_known_sources()}", field="spec")
    prefix, _, rest = spec.strip().partition(":")
    if prefix.lower() == "hf":
        name, _, _ = _hf.parse_spec(rest.strip())
        if name.lower() not in _hf._BY_NAME and "/" not in name:
            raise InputError(f"unknown dataset {name!r} in {spec!r}: not a supported name nor an owner/name "
                             f"id; supported: {'; '.join(_hf.supported())}", field="spec")
    elif prefix.lower() == "jsonl":
        from pathlib import Path

        if not Path(rest.strip()).is_file():
            raise InputError(f"{spec!r}: no such file {rest.strip()!r}", field="spec")
    else:
        load(spec, n=1)


def list_builtin() -> dict[str, str]:
    """One-line description of each built-in task generator, by name (SPEC §7)."""
    return {name: module.DESCRIPTION for name, module in BUILTINS.items()}


def preview(spec: str, n: int = 3, seed: int = 0, split: str = "test") -> str:
    """Human-readable text showing the first ``n`` problems of a source (SPEC §7)."""
    records = load(spec, n=n, seed=seed, split=split)
    blocks = []
    for r in records:
        blocks.append(f"[{r['id']}] field={r['field']} verifier={r['verifier']}\n"
                      f"{r['problem']}\n=> {r['answer']}")
    return "\n\n".join(blocks) if blocks else f"(no problems in {spec})"
