"""Problem sources: built-in generators, local JSONL and Hugging Face datasets.

A problem record is a dict ``{"id", "problem", "answer", "verifier", "field"}`` (plus an
optional ``"meta"`` dict); ``verifier`` is a registered verifier (:func:`hista.rewards.names`)
and ``field`` is the category label SVEB reports by.  Sources are named by a spec string
``PREFIX:REST``, the prefix selecting a registered :class:`TaskSource`:

* ``builtin:NAME[?k=v&k=v]``: a seeded generator (``arith``, ``choice``), see :func:`list_builtin`;
* ``jsonl:PATH``: one JSON object per line, see :mod:`hista.tasks.jsonl`;
* ``hf:NAME[:CONFIG][@SPLIT]``: a Hugging Face dataset, see :mod:`hista.tasks.hf`.

A source is a :class:`TaskSource` subclass decorated with ``@register(prefix)`` next to its
definition; other packages add theirs through the entry-point group ``hista.tasks``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from hista.errors import InputError
from hista.tasks._common import check_count, check_seed
from hista.tasks.base import REGISTRY, TaskSource, register
from hista.tasks.filter import filter_by_accuracy

__all__ = ["REGISTRY", "TaskSource", "check_spec", "filter_by_accuracy", "get", "list_builtin", "load", "names",
           "preview", "register"]


def names() -> list[str]:
    """The registered source prefixes, sorted, without the colon."""
    return REGISTRY.names()


def get(prefix: str) -> TaskSource:
    """The source registered under ``prefix``; an InputError listing the valid ones."""
    return REGISTRY.get(prefix)


def _builtins() -> dict:
    from hista.tasks.builtin import BUILTINS

    return BUILTINS


def _known_sources() -> str:
    return "valid prefixes: " + "; ".join(f"{p}: ({REGISTRY.lookup(p).description})" for p in names())


def _source(spec: str) -> tuple[TaskSource, str]:
    """The source a spec names and the rest of the spec after ``PREFIX:``."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"empty task spec; {_known_sources()}", field="spec")
    spec = spec.strip()
    prefix, sep, rest = spec.partition(":")
    if not sep or prefix.lower() not in names():
        hint = f" (did you mean builtin:{spec}?)" if spec.split("?")[0] in _builtins() else ""
        raise InputError(f"unknown task source {spec!r}{hint}; {_known_sources()}", field="spec")
    return get(prefix.lower()), rest.strip()


def load(spec: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
    """Load problem records from a source spec.

    ``n``: how many (built-ins generate ``n``, default 1000; files and datasets return their
    first ``n`` rows, default all).  ``seed`` and ``split`` (``train``, ``test``,
    ``validation``) drive the built-in generators; for ``hf:`` ``split`` is the dataset split
    unless the spec names one with ``@SPLIT``; a ``jsonl:`` file is used as it is.
    Raises :class:`hista.errors.InputError` for any bad spec, option or input file, and for a
    source that holds no problems (an empty file, one with only blank lines, an empty dataset
    split) unless ``n=0`` asked for none, so callers fail before loading a model.
    """
    source, rest = _source(spec)
    if n is not None:
        check_count(n, 0)
    check_seed(seed)
    if not isinstance(split, str) or not split.strip():
        raise InputError(f"split must be a non-empty string, got {split!r}", field="split")
    records = source.load(rest, n, seed, split)
    if not records and n != 0:
        raise InputError(f"task source {spec.strip()!r} holds no problems (an empty file, only blank lines, or "
                         f"an empty split); give it at least one problem record", field="spec")
    return records


def input_files(specs: Sequence[str]) -> list[Path]:
    """The local files the task ``specs`` read (``jsonl:PATH``), for the check that
    no output of a command overwrites one of its inputs. A bad spec raises InputError."""
    out: list[Path] = []
    for spec in specs:
        source, rest = _source(spec)
        out += source.files(rest)
    return out


def check_spec(spec: str) -> None:
    """Check a source spec without downloading anything: built-ins generate one
    problem, ``jsonl:`` files are read and validated, ``hf:`` names must parse and be a
    supported dataset or an ``owner/name`` id (or a local path). Raises InputError."""
    source, rest = _source(spec)
    source.check(rest)


def list_builtin() -> dict[str, str]:
    """One-line description of each built-in task generator, by name."""
    return {name: module.DESCRIPTION for name, module in _builtins().items()}


def preview(spec: str, n: int = 3, seed: int = 0, split: str = "test") -> str:
    """Human-readable text showing the first ``n`` problems of a source: each one's id,
    field, verifier, text and answer (the ``gold`` of its ``meta`` where a source puts the
    answer a reader wants there, as ``gym:`` does beside its scorer's record)."""
    records = load(spec, n=n, seed=seed, split=split)
    blocks = []
    for r in records:
        blocks.append(f"[{r['id']}] field={r['field']} verifier={r['verifier']}\n"
                      f"{r['problem']}\n=> {r.get('meta', {}).get('gold') or r['answer']}")
    return "\n\n".join(blocks) if blocks else f"(no problems in {spec})"
