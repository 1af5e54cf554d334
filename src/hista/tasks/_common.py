"""Shared machinery of the built-in task generators.

* ``parse_options`` reads ``?k=v&k=v`` knobs and validates them against a schema.
* ``index_rng`` gives the per-problem random generator, seeded from the problem id (which
  encodes the generator, its knobs, the seed, the split and the index), so problem ``i`` is
  the same whatever ``n`` is.
* ``split_of_text`` partitions the space of problem *texts* between the splits by a hash of
  the text.  A generator keeps a candidate for split X only when ``split_of_text(text) == X``;
  since a text has exactly one hash, no text can be kept by two splits, whatever the seeds.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

from hista.errors import InputError

#: Canonical split names, in the order of their hash bucket.
SPLITS = ("train", "test", "validation")
_SPLIT_ALIASES = {"val": "validation", "valid": "validation", "dev": "validation"}

#: Candidates drawn per problem before giving up (a split keeps about 1 in 3 texts).
MAX_ATTEMPTS = 400


@dataclass(frozen=True)
class Knob:
    """One generator option: how to parse it, its default, and a one-line help."""

    parse: Callable[[str], Any]
    default: Any
    help: str


def _yes_no(raw: str) -> str:
    if raw not in ("yes", "no"):
        raise ValueError("must be yes or no")
    return raw


#: the ``explain`` option of the built-in generators: ``yes`` appends a request for a detailed
#: explanation to every problem, for long responses (the SVEB ``long`` preset)
EXPLAIN = Knob(_yes_no, "no", "'yes' asks for a detailed explanation (long responses), default 'no'")


def canonical_split(split: str) -> str:
    """Return the canonical split name, or raise InputError listing the valid ones."""
    if not isinstance(split, str):
        raise InputError(f"split must be a string, got {type(split).__name__}", field="split")
    s = _SPLIT_ALIASES.get(split.strip().lower(), split.strip().lower())
    if s not in SPLITS:
        raise InputError(
            f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}", field="split"
        )
    return s


def parse_options(spec: str, query: str, knobs: dict[str, Knob]) -> dict[str, Any]:
    """Parse ``k=v&k=v`` into a dict of validated knob values (defaults filled in)."""
    valid = ", ".join(knobs)
    values: dict[str, Any] = {}
    if query:
        for part in query.split("&"):
            if not part:
                continue
            if "=" not in part:
                raise InputError(
                    f"{spec}: option {part!r} must be written name=value; valid options: {valid}",
                    field=part,
                )
            key, raw = part.split("=", 1)
            key = key.strip()
            if key not in knobs:
                raise InputError(
                    f"{spec}: unknown option {key!r}; valid options: {valid}", field=key
                )
            if key in values:
                raise InputError(f"{spec}: option {key!r} given twice", field=key)
            try:
                values[key] = knobs[key].parse(raw.strip())
            except InputError:
                raise
            except (ValueError, TypeError) as exc:
                raise InputError(
                    f"{spec}: bad value {raw!r} for option {key!r} ({knobs[key].help}): {exc}",
                    field=key,
                ) from None
    for key, knob in knobs.items():
        values.setdefault(key, knob.default)
    return values


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """Parser for an integer option in [lo, hi]."""

    def parse(raw: str) -> int:
        try:
            v = int(raw)
        except ValueError:
            raise ValueError("not an integer") from None
        if not lo <= v <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return v

    return parse


def one_of(*choices: str) -> Callable[[str], str]:
    """Parser for an option taking one of a few words."""

    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw

    return parse


def _hash_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def index_rng(problem_id: str) -> random.Random:
    """Per-problem RNG seeded from the problem id (generator, knobs, seed, split, index)."""
    return random.Random(_hash_int("hista-tasks-rng|" + problem_id))


def split_of_text(text: str) -> str:
    """The one split that may hold this problem text (hash partition, seed-independent)."""
    return SPLITS[_hash_int("hista-tasks-split|" + text) % len(SPLITS)]


def check_count(n: Optional[int], default: int) -> int:
    """Validate ``n`` (None -> default)."""
    if n is None:
        return default
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InputError(f"n must be a non-negative integer or None, got {n!r}", field="n")
    return n


def check_seed(seed: int) -> int:
    """Validate the seed."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"seed must be an integer, got {seed!r}", field="seed")
    return seed


def generate(
    spec: str,
    id_prefix: str,
    split: str,
    n: int,
    make: Callable[[random.Random], Optional[tuple[str, str, dict]]],
    verifier: str,
    field: str,
) -> list[dict]:
    """Draw ``n`` problems; problem i uses its own RNG and is kept only if its text hashes to
    ``split``.  ``make(rng)`` returns ``(problem, answer, meta)``, or None when the draw was
    infeasible (it then counts as a failed attempt)."""
    out = []
    for i in range(n):
        pid = f"{id_prefix}-{split}-{i:05d}"
        rng = index_rng(pid)
        for _ in range(MAX_ATTEMPTS):
            drawn = make(rng)
            if drawn is None:
                continue
            problem, answer, meta = drawn
            if split_of_text(problem) == split:
                break
        else:
            raise InputError(
                f"{spec}: could not generate problem {i} for split {split!r} in "
                f"{MAX_ATTEMPTS} tries; the options allow too few distinct problems",
                field="spec",
            )
        out.append(
            {
                "id": pid,
                "problem": problem,
                "answer": answer,
                "verifier": verifier,
                "field": field,
                "meta": meta,
            }
        )
    return out
