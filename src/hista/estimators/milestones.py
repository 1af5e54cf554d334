"""Numerical milestones for Numca (SPEC §4.2): parse the numbers of a completion with their
character positions, map them to the completion tokens that hold them, and cut a rollout into
macro states (the set of distinct numbers seen so far).

Two parsers:

- ``"default"``: integers, decimals and fractions, normalised to an exact rational so that
  ``05``, ``5``, ``5.0`` and ``10/2`` are one number (key ``"5"``), ``0.5``, ``.5``, ``1/2``,
  ``2/4`` and ``\\frac{1}{2}`` are one number (key ``"1/2"``). Rules, in order:

  * digits are ASCII ``0-9``; a number is recognised wherever its digits are, whatever letters
    surround it (``x2`` -> 2, ``3x`` -> 3, ``2nd`` -> 2, ``H2O`` -> 2), like the reference;
  * thousands separators: ``1,000`` and ``12,345,678`` are one number when every group after
    a comma has exactly three digits and no digit follows (``1,2,3`` is three numbers, ``1,0001``
    is ``1`` then ``0001``); a space after the comma always separates (``(3, 4)``);
  * decimals: ``3.25`` and ``.5`` (a leading dot only after a character that is not a letter,
    digit, ``_`` or ``.``); a trailing dot is punctuation (``5.`` -> 5); ``1.2.3`` -> 1.2, 3;
  * fractions ``a/b`` with no spaces around the slash (``6 / 3`` is two numbers: a division
    written out), and LaTeX ``\\frac{a}{b}``, ``\\dfrac{a}{b}``, ``\\tfrac{a}{b}`` and the
    shorthand ``\\frac12``, with plain numbers as ``a`` and ``b``; a zero denominator makes
    them two numbers; nested LaTeX (``\\frac{\\sqrt3}{2}``) yields its plain numbers;
  * a minus sign (``-`` or ``−``) directly before a number is its sign unless it follows a
    letter, digit, ``_``, ``.`` or a closing bracket (``x-1`` and ``2-3`` are subtractions,
    ``(-3)``, ``= -3`` and ``is -3`` are negative numbers);
  * a number's position is its first character, sign and ``\\frac`` included; percent signs,
    units and scientific notation are not interpreted (``1e5`` -> 1 and 5).

- ``"digits"``: maximal runs of ``\\d`` (Python's Unicode decimal digits), compared as the raw
  strings, no sign, no normalisation (``05`` and ``5`` differ): the reference
  implementation's rule.
"""

from __future__ import annotations

import bisect
import math
import re
from fractions import Fraction
from typing import Iterable, NamedTuple, Optional, Sequence

PARSERS = ("default", "digits")


class Number(NamedTuple):
    """A parsed number: its normalised ``key`` and the character span [start, end)."""

    key: str
    start: int
    end: int


_NUM = r"(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?|(?<![0-9A-Za-z_.])\.[0-9]+)"
_SIGN = r"(?:(?<![0-9A-Za-z_.)\]}])[-\u2212](?=[0-9.\\]))?"
_DEFAULT = re.compile(
    rf"(?P<sign>{_SIGN})"
    r"(?:\\[dt]?frac\s*(?:\{\s*(?P<fs>[-\u2212]?)(?P<fn>" + _NUM + r")\s*\}\s*\{\s*(?P<ds>[-\u2212]?)(?P<fd>"
    + _NUM
    + r")\s*\}|(?P<fn1>[0-9])(?P<fd1>[0-9]))"
    rf"|(?P<num>{_NUM})(?:/(?P<den>{_NUM}))?)"
)
_DIGITS = re.compile(r"\d+")


def _value(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def _key(value: Fraction) -> str:
    return str(value)


def _default_numbers(text: str) -> list[Number]:
    out = []
    for m in _DEFAULT.finditer(text):
        negative = bool(m.group("sign"))
        if m.group("num") is not None:
            num, den = m.group("num"), m.group("den")
            if den is None or _value(den) == 0:
                value = -_value(num) if negative else _value(num)
                out.append(Number(_key(value), m.start(), m.end("num")))
                if den is not None:  # x/0 is no fraction: two numbers
                    out.append(Number(_key(_value(den)), m.start("den"), m.end()))
                continue
            value = _value(num) / _value(den)
        else:
            fn = m.group("fn") if m.group("fn") is not None else m.group("fn1")
            fd = m.group("fd") if m.group("fd") is not None else m.group("fd1")
            n = -_value(fn) if m.group("fs") else _value(fn)
            d = -_value(fd) if m.group("ds") else _value(fd)
            if d == 0:  # \frac{a}{0}: two numbers, where their digits are
                nstart = m.start("fn") if m.group("fn") is not None else m.start("fn1")
                dstart = m.start("fd") if m.group("fd") is not None else m.start("fd1")
                out.append(Number(_key(-n if negative else n), m.start() if negative else nstart, nstart + len(fn)))
                out.append(Number(_key(d), dstart, dstart + len(fd)))
                continue
            value = n / d
        out.append(Number(_key(-value if negative else value), m.start(), m.end()))
    return out


def parse_numbers(text: str, parser: str = "default") -> list[Number]:
    """Every number of ``text`` in order, with its character span (SPEC §4.2; rules in the
    module docstring)."""
    if parser == "default":
        return _default_numbers(text)
    if parser == "digits":
        return [Number(m.group(0), m.start(), m.end()) for m in _DIGITS.finditer(text)]
    raise ValueError(f"unknown parser {parser!r}; valid: {', '.join(PARSERS)}")


def token_positions(char_positions: Iterable[int], offsets: Sequence[tuple[int, int]]) -> list[int]:
    """Milestone positions p (SPEC §4.2): for each character position, 1 + the index of the
    first completion token whose span ends after it (the token that holds that character),
    i.e. the number of tokens up to and including it; len(offsets) when no token does."""
    running, ends = 0, []
    for _, end in offsets:  # running maximum: "first token whose end > pos" by bisection
        running = max(running, end)
        ends.append(running)
    return [bisect.bisect_right(ends, pos) + 1 if pos < running else len(offsets) for pos in char_positions]


def merge_forward(positions: Sequence[int], merge: int) -> list[int]:
    """Merge close milestones forward (SPEC §4.2), right to left: milestone k moves to the
    (already merged) position of milestone k+1 when that is less than ``merge`` later. After
    merging, distinct positions are at least ``merge`` apart; the last milestone stays."""
    out = list(positions)
    for k in range(len(out) - 2, -1, -1):
        if out[k + 1] - out[k] < merge:
            out[k] = out[k + 1]
    return out


def macro_path(
    keys: Sequence[str], positions: Sequence[int], merge: int, merge_repeats: bool = False
) -> list[tuple[int, frozenset]]:
    """The macro states a response passes through, as [(p_k, S_k)] with strictly increasing
    positions (SPEC §4.2). ``keys``/``positions``: its numbers in order (final one already
    dropped). Only the first occurrence of a number is a milestone (a repeat leaves the set
    unchanged); milestones are merged forward (:func:`merge_forward`) and milestones that land
    on one position become one, holding the largest set. ``merge_repeats=True`` lets repeated
    occurrences take part in the merging too (the reference implementation)."""
    seen: set = set()
    firsts = []
    for k, key in enumerate(keys):
        if key not in seen:
            seen.add(key)
            firsts.append(k)
    if merge_repeats:
        merged = merge_forward(positions, merge)
        pos = [merged[k] for k in firsts]
    else:
        pos = merge_forward([positions[k] for k in firsts], merge)
    path: list[tuple[int, frozenset]] = []
    state: frozenset = frozenset()
    for k, p in zip(firsts, pos):
        state = state | {keys[k]}
        if path and path[-1][0] == p:
            path[-1] = (p, state)
        else:
            path.append((p, state))
    return path


def state_chain(keys: Iterable[str]) -> list[frozenset]:
    """[∅, S_1, S_2, ...]: the sets of distinct numbers after each new number."""
    chain = [frozenset()]
    for key in keys:
        if key not in chain[-1]:
            chain.append(chain[-1] | {key})
    return chain


class ValueTable:
    """Numca's value table (SPEC §4.2): for every macro state, how many responses reached it and
    the sum of their rewards. Each response adds its reward once to every state it passes
    through (∅ included), whatever the merging."""

    def __init__(self) -> None:
        self.stats: dict[frozenset, list[float]] = {}

    def __len__(self) -> int:
        return len(self.stats)

    def add(self, keys: Iterable[str], reward: float) -> None:
        """Add one response's ``reward`` to every macro state of the chain of ``keys`` (SPEC
        §4.2); a NaN or infinite reward raises ValueError naming ``reward``."""
        if not math.isfinite(float(reward)):
            raise ValueError(f"reward is {float(reward)}; rewards must be finite")
        for state in state_chain(keys):
            entry = self.stats.setdefault(state, [0.0, 0.0])
            entry[0] += 1.0
            entry[1] += float(reward)

    def get(self, state: frozenset) -> Optional[float]:
        """Mean reward of the responses that reached ``state``; None if none did."""
        entry = self.stats.get(state)
        if entry is None or entry[0] == 0:
            return None
        return entry[1] / entry[0]
