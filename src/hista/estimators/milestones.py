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
    units and scientific notation are not interpreted (``1e5`` -> 1 and 5);
  * keys are exact: an integer's key is its digits (any length); a decimal or fraction with
    more than ``MAX_EXACT_DIGITS`` (400) significant digits keeps them as written (``0.`` and
    500 ones is the key ``0.111…``, not a reduced ``p/q``), so parsing stays linear in the text
    whatever its numbers.

- ``"digits"``: maximal runs of ``\\d`` (Python's Unicode decimal digits), compared as the raw
  strings, no sign, no normalisation (``05`` and ``5`` differ): the reference
  implementation's rule.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import math
import re
from typing import Iterable, NamedTuple, Optional, Sequence

import torch

from ..errors import InputError
from ..schema import fields

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


#: most significant digits of a decimal or fraction normalised exactly (an integer always is).
MAX_EXACT_DIGITS = 400


def _parts(text: str) -> tuple[str, str]:
    """A number's integer and fractional digits without separators, leading zeros of the
    integer part or trailing zeros of the fractional part: ``"01,000.50"`` -> ``("1000", "5")``."""
    whole, _, frac = text.replace(",", "").partition(".")
    return whole.lstrip("0"), frac.rstrip("0")


def _ratio(whole: str, frac: str) -> tuple[int, int]:
    return int(whole + frac or "0"), 10 ** len(frac)


def _text_key(whole: str, frac: str) -> str:
    return (whole or "0") + ("." + frac if frac else "")


def _signed(key: str, negative: bool) -> str:
    return "-" + key if negative and key != "0" else key


def _rational_key(num: int, den: int) -> str:
    """``str(Fraction(num, den))`` for ``den != 0``, without building the Fraction."""
    if den < 0:
        num, den = -num, -den
    g = math.gcd(num, den)
    if g != 1:
        num, den = num // g, den // g
    return str(num) if den == 1 else f"{num}/{den}"


def _number_key(text: str, negative: bool) -> str:
    """The key of one plain number (SPEC §4.2): ``str`` of its exact value.  An integer's key
    is written from its digits (any length, linear time); a decimal with more than
    ``MAX_EXACT_DIGITS`` significant digits keeps its digits as written (``"1.25"``), since
    normalising it exactly costs time quadratic in its length."""
    whole, frac = _parts(text)
    if not frac:
        return _signed(whole or "0", negative)
    if len(whole) + len(frac) > MAX_EXACT_DIGITS:
        return _signed(_text_key(whole, frac), negative)
    num, den = _ratio(whole, frac)
    return _rational_key(-num if negative else num, den)


def _fraction_key(num: str, den: str, negative: bool) -> str:
    """The key of the fraction ``num/den`` (plain numbers, ``den`` not zero) with the sign
    ``negative``: its reduced value, or past ``MAX_EXACT_DIGITS`` significant digits the two
    numbers as written (``"1/3"`` style, not reduced)."""
    nw, nf = _parts(num)
    dw, df = _parts(den)
    if len(nw) + len(nf) + len(dw) + len(df) > MAX_EXACT_DIGITS:
        return _signed(_text_key(nw, nf), negative) + "/" + _text_key(dw, df)
    n, nscale = _ratio(nw, nf)
    d, dscale = _ratio(dw, df)
    n, d = n * dscale, d * nscale
    return _rational_key(-n if negative else n, d)


def _is_zero(text: str) -> bool:
    return not text.replace(",", "").replace(".", "").strip("0")


_new = tuple.__new__  # Number(...) without the Python-level __new__ (a hot loop)


def _default_numbers(text: str) -> list[Number]:
    # Linear in ``text``: one regex pass (no nested repetition can re-read a span) and, per
    # number, work linear in its length (integers and long numbers are keyed from their digits);
    # a number written before (``1``, ``-2.5``, ``\frac{1}{2}``) is keyed by a dict lookup.
    out: list[Number] = []
    append = out.append
    seen: dict[str, str] = {}  # key of each single number of this text, by its text (sign included)
    for m in _DEFAULT.finditer(text):
        key = seen.get(m.group())
        if key is None:
            key = _match_key(m, append)
            if key is None:  # two numbers (a zero denominator), appended
                continue
            seen[m.group()] = key
        append(_new(Number, (key, m.start(), m.end())))
    return out


def _match_key(m: re.Match, append) -> Optional[str]:
    """The key of the number matched by ``m``; or, when it is two numbers (``x/0``,
    ``\\frac{a}{0}``), None after appending both."""
    sign, num, den = m.group("sign", "num", "den")
    negative = bool(sign)
    if num is not None:
        if den is None:
            if num.isdigit():
                key = num.lstrip("0") or "0"
                return "-" + key if negative and key != "0" else key
            return _number_key(num, negative)
        if not _is_zero(den):
            return _fraction_key(num, den, negative)
        append(Number(_number_key(num, negative), m.start(), m.end("num")))
        append(Number(_number_key(den, False), m.start("den"), m.end()))
        return None
    fn, fd, fs, ds = m.group("fn", "fd", "fs", "ds")
    nstart = m.start("fn") if fn is not None else m.start("fn1")
    dstart = m.start("fd") if fd is not None else m.start("fd1")
    if fn is None:
        fn, fd = m.group("fn1", "fd1")
    if not _is_zero(fd):
        return _fraction_key(fn, fd, negative ^ bool(fs) ^ bool(ds))
    # \frac{a}{0}: two numbers, where their digits are
    append(Number(_number_key(fn, negative ^ bool(fs)), m.start() if negative else nstart, nstart + len(fn)))
    append(Number(_number_key(fd, False), dstart, dstart + len(fd)))
    return None


def parse_numbers(text: str, parser: str = "default") -> list[Number]:
    """Every number of ``text`` in order, with its character span (SPEC §4.2; rules in the
    module docstring)."""
    if parser == "default":
        return _default_numbers(text)
    if parser == "digits":
        return [_new(Number, (m.group(), m.start(), m.end())) for m in _DIGITS.finditer(text)]
    raise ValueError(f"unknown parser {parser!r}; valid: {', '.join(PARSERS)}")


#: a character no number goes on with, by parser: the default parser reads ASCII digits, ``.``,
#: ``,``, ``/``, signs, braces and spaces (``\\frac { 1 } { 2 }``) into its numbers (``\\frac``'s
#: letters only after a backslash), ``digits`` only digits.
_WHOLE = {"default": re.compile(r"[^0-9.,/{}\s\-\u2212]"), "digits": re.compile(r"\D")}


def whole_at(text: str, numbers: Sequence[Number], parser: str = "default") -> list[Optional[int]]:
    """For each of the ``numbers`` of ``text`` (:func:`parse_numbers` with ``parser``), the
    position of the first character at or after its end that no number goes on with, or None
    when the text ends first (issue 63). From that character on, a prefix of ``text`` holds the
    number whole, and the prefix's own parse reads it so: every number the parser takes from a
    prefix up to its last such character is one of the text's (the parser consumes no such
    character but ``\\frac``'s letters, and a number cannot end inside those). Linear in the text."""
    pattern, out, stop = _WHOLE[parser], [], -1
    for n in numbers:
        if stop < n.end:  # the numbers' ends do not decrease: each search reads new text
            found = pattern.search(text, n.end)
            stop = found.start() if found else len(text)
        out.append(stop if stop < len(text) else None)
    return out


def token_positions(char_positions: Iterable[int], offsets: Sequence[tuple[int, int]]) -> list[int]:
    """Milestone positions p (SPEC §4.2): for each character position, 1 + the index of the
    first completion token whose span ends after it (the token that holds that character),
    i.e. the number of tokens up to and including it; len(offsets) when no token does."""
    # running maximum of the ends: "first token whose end > pos" by bisection
    ends = list(itertools.accumulate((end for _, end in offsets), max, initial=0))[1:]
    running, n, right = (ends[-1] if ends else 0), len(offsets), bisect.bisect_right
    return [right(ends, pos) + 1 if pos < running else n for pos in char_positions]


def merge_forward(positions: Sequence[int], merge: int) -> list[int]:
    """Merge close milestones forward (SPEC §4.2), right to left: milestone k moves to the
    (already merged) position of milestone k+1 when that is less than ``merge`` later. After
    merging, distinct positions are at least ``merge`` apart; the last milestone stays."""
    out = list(positions)
    for k in range(len(out) - 2, -1, -1):
        if out[k + 1] - out[k] < merge:
            out[k] = out[k + 1]
    return out


#: A macro state's identity (SPEC §4.2): (number of keys, 64-bit sum, 64-bit xor of their
#: keys' 128-bit BLAKE2 hashes). Equal sets have equal ids whatever the order their numbers came
#: in, and a state's id follows from its parent's in O(1), so a chain of k states costs O(k)
#: where k frozensets cost O(k²) time and memory (a completion of 12,000 distinct numbers).
StateId = tuple[int, int, int]
#: the id of the empty state ∅.
EMPTY: StateId = (0, 0, 0)
_MASK = (1 << 64) - 1


@functools.lru_cache(maxsize=1 << 16)
def _key_hash(key: str) -> tuple[int, int]:
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


def _with_key(state: StateId, key: str) -> StateId:
    """The id of ``state`` plus ``key``, a number not in it."""
    a, b = _key_hash(key)
    return state[0] + 1, (state[1] + a) & _MASK, state[2] ^ b


def state_id(keys: Iterable[str]) -> StateId:
    """The id of the macro state holding the numbers ``keys`` (a set; repeats count once)."""
    state = EMPTY
    for key in set(keys):
        state = _with_key(state, key)
    return state


def _firsts(keys: Sequence[str]) -> list[int]:
    """Indices of the first occurrence of every number of ``keys``."""
    seen: set = set()
    firsts = []
    for k, key in enumerate(keys):
        if key not in seen:
            seen.add(key)
            firsts.append(k)
    return firsts


def _merged_path(keys: Sequence[str], positions: Sequence[int], merge: int,
                 merge_repeats: bool) -> list[tuple[int, int]]:
    """[(p_k, number of distinct keys in S_k)] of :func:`macro_path`."""
    firsts = _firsts(keys)
    if merge_repeats:
        merged = merge_forward(positions, merge)
        pos = [merged[k] for k in firsts]
    else:
        pos = merge_forward([positions[k] for k in firsts], merge)
    path: list[tuple[int, int]] = []
    for size, p in enumerate(pos, 1):
        if path and path[-1][0] == p:
            path[-1] = (p, size)
        else:
            path.append((p, size))
    return path


def path_states(
    keys: Sequence[str], positions: Sequence[int], merge: int, merge_repeats: bool = False
) -> list[tuple[int, StateId]]:
    """:func:`macro_path` with the states as ids (:data:`StateId`): linear time."""
    chain = chain_states(keys)
    return [(p, chain[size]) for p, size in _merged_path(keys, positions, merge, merge_repeats)]


def macro_path(
    keys: Sequence[str], positions: Sequence[int], merge: int, merge_repeats: bool = False
) -> list[tuple[int, frozenset]]:
    """The macro states a response passes through, as [(p_k, S_k)] with strictly increasing
    positions (SPEC §4.2). ``keys``/``positions``: its numbers in order (final one already
    dropped). Only the first occurrence of a number is a milestone (a repeat leaves the set
    unchanged); milestones are merged forward (:func:`merge_forward`) and milestones that land
    on one position become one, holding the largest set. ``merge_repeats=True`` lets repeated
    occurrences take part in the merging too (the reference implementation). The sets are
    written out (quadratic in the number of distinct numbers): the estimator uses
    :func:`path_states`."""
    distinct = [keys[k] for k in _firsts(keys)]
    return [(p, frozenset(distinct[:size])) for p, size in _merged_path(keys, positions, merge, merge_repeats)]


def chain_states(keys: Iterable[str]) -> list[StateId]:
    """:func:`state_chain` as ids (:data:`StateId`): linear time."""
    chain = [EMPTY]
    seen: set = set()
    for key in keys:
        if key not in seen:
            seen.add(key)
            chain.append(_with_key(chain[-1], key))
    return chain


def state_chain(keys: Iterable[str]) -> list[frozenset]:
    """[∅, S_1, S_2, ...]: the sets of distinct numbers after each new number (written out:
    quadratic in their number; the estimator uses :func:`chain_states`)."""
    distinct = list(dict.fromkeys(keys))
    return [frozenset(distinct[:size]) for size in range(len(distinct) + 1)]


class ValueTable:
    """Numca's value table (SPEC §4.2): for every macro state, how many responses reached it and
    the sum of their rewards. Each response adds its reward once to every state it passes
    through (∅ included), whatever the merging. States are kept by id (:data:`StateId`), so
    adding a response is linear in its numbers."""

    def __init__(self) -> None:
        self._count: dict[StateId, float] = {}
        self._total: dict[StateId, float] = {}
        self._parent: dict[StateId, tuple[StateId, str]] = {}  # a state -> (its parent, the key added)

    def __len__(self) -> int:
        return len(self._count)

    def _keys(self, state: StateId) -> frozenset:
        keys = []
        while state != EMPTY:
            state, key = self._parent[state]
            keys.append(key)
        return frozenset(keys)

    @property
    def stats(self) -> dict[frozenset, list[float]]:
        """``{state: [responses that reached it, sum of their rewards]}`` with the states
        written out as frozensets (built on each access, for inspection)."""
        return {self._keys(state): [n, self._total[state]] for state, n in self._count.items()}

    def add(self, keys: Iterable[str], reward: float) -> None:
        """Add one response's ``reward`` to every macro state of the chain of ``keys`` (SPEC
        §4.2); a NaN or infinite reward raises ValueError naming ``reward``."""
        if not math.isfinite(float(reward)):
            raise ValueError(f"reward is {float(reward)}; rewards must be finite")
        reward = float(reward)
        count, total, parent = self._count, self._total, self._parent
        state = EMPTY
        count[state] = count.get(state, 0.0) + 1.0
        total[state] = total.get(state, 0.0) + reward
        seen: set = set()
        for key in keys:
            if key in seen:
                continue
            seen.add(key)
            child = _with_key(state, key)
            n = count.get(child)
            if n is None:
                count[child], total[child], parent[child] = 1.0, reward, (state, key)
            else:
                count[child], total[child] = n + 1.0, total[child] + reward
            state = child

    def get(self, state: "StateId | frozenset") -> Optional[float]:
        """Mean reward of the responses that reached ``state`` (an id, :data:`StateId`, or a
        set of keys); None if none did."""
        if not isinstance(state, tuple):
            state = state_id(state)
        n = self._count.get(state)
        if not n:
            return None
        return self._total[state] / n

    def without(self, keys: Iterable[str], reward: float) -> "LeftOut":
        """This table less one response it holds, the one with the numbers ``keys`` and
        ``reward``: what a baseline for that response's states may read (leave-one-out; docs/
        estimators.md "Valid baselines")."""
        return LeftOut(self, keys, reward)

    def state_dict(self) -> dict:
        """The table as tensors and strings (SPEC §9: a checkpoint keeps Numca's persisted
        tables): its states in the order they were first reached, ∅ first, each as ``parent``
        (the index of the state it was first reached from; −1 for ∅), ``key`` (the number it
        adds; "" for ∅), ``count`` and ``total`` (float64). :meth:`from_state` restores it."""
        index = {state: i for i, state in enumerate(self._count)}
        parents = [self._parent.get(state) for state in self._count]
        return {"parent": torch.tensor([-1 if p is None else index[p[0]] for p in parents], dtype=torch.int64),
                "key": ["" if p is None else p[1] for p in parents],
                "count": torch.tensor(list(self._count.values()), dtype=torch.float64),
                "total": torch.tensor(list(self._total.values()), dtype=torch.float64)}

    @classmethod
    def from_state(cls, state: object, field: str = "table") -> "ValueTable":
        """The table :meth:`state_dict` gave, read back from a checkpoint and so checked
        strictly: exactly its four fields, of one length n; ``parent`` int64 [n]
        with −1 for ∅ (the first state, if any) and an earlier index for every other; ``key`` n
        strings, "" for ∅ alone; ``count`` float64 [n] of whole numbers >= 1; ``total`` float64
        [n], finite; no state twice. Anything else is an InputError naming ``field`` and the
        key at fault."""
        fields(state, ("parent", "key", "count", "total"), what="a value table", field=field, prefix=field)
        keys = state["key"]
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise InputError(f"expected a list of strings, got {type(keys).__name__}", field=f"{field}.key")
        n = len(keys)
        for name, dtype in (("parent", torch.int64), ("count", torch.float64), ("total", torch.float64)):
            value = state[name]
            if (not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.dtype != dtype
                    or list(value.shape) != [n]):
                got = (f"a {value.dtype} tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                raise InputError(f"expected a {dtype} tensor of shape [{n}] (one entry per state), got {got}",
                                 field=f"{field}.{name}")
        parent, count, total = state["parent"].tolist(), state["count"], state["total"]
        if not bool(torch.isfinite(total).all()):
            raise InputError("holds NaN or infinite values", field=f"{field}.total")
        if not bool((torch.isfinite(count) & (count >= 1) & (count == count.floor())).all()):
            raise InputError("expected whole numbers >= 1 (responses that reached each state)", field=f"{field}.count")
        table, ids = cls(), []
        for i, (up, key) in enumerate(zip(parent, keys)):
            if i == 0 and (up != -1 or key != ""):
                raise InputError("the first state must be the empty one (parent -1, key \"\")", field=f"{field}[0]")
            if i > 0 and (not 0 <= up < i or key == ""):
                raise InputError(f"expected a parent among the earlier states 0..{i - 1} and a number, got parent {up} "
                                 f"and key {key[:40]!r}", field=f"{field}[{i}]")
            state_id = EMPTY if i == 0 else _with_key(ids[up], key)
            if state_id in table._count:
                raise InputError("a state that is already in the table", field=f"{field}[{i}]")
            ids.append(state_id)
            table._count[state_id], table._total[state_id] = float(count[i]), float(total[i])
            if i:
                table._parent[state_id] = (ids[up], key)
        return table


class LeftOut:
    """A :class:`ValueTable` less one of its responses (:meth:`ValueTable.without`). ``get`` gives
    the mean reward of the *other* responses that reached a state (None if none did); with no
    other response at all, ∅ is worth the left-out reward (an advantage of 0, as GRPO's
    leave-one-out mean gives a group of one)."""

    def __init__(self, table: ValueTable, keys: Iterable[str], reward: float) -> None:
        self._table, self._own, self._reward = table, set(chain_states(keys)), float(reward)

    def get(self, state: "StateId | frozenset") -> Optional[float]:
        if not isinstance(state, tuple):
            state = state_id(state)
        count, total = self._table._count.get(state, 0.0), self._table._total.get(state, 0.0)
        if state in self._own:
            count, total = count - 1.0, total - self._reward
        if count > 0:
            return total / count
        return self._reward if state == EMPTY else None
