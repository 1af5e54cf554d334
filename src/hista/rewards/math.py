"""Math verifier: final answer extraction and equivalence checking.

Extraction, in order:

1. the **last complete** ``\\boxed{...}`` / ``\\fbox{...}`` (or ``\\boxed 42``): braces are
   matched by a linear scan (``\\{`` and ``\\}`` are literal braces, not groups), so
   ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``.  With several boxes the last one counts
   (by opening position, so ``\\boxed{\\boxed{3}}`` gives ``3``); an unclosed or empty box is
   ignored and the previous complete box is used;
2. without a usable box, the content of the last ``<answer>...</answer>`` tag, if any, is the
   text searched in step 3;
3. otherwise math-verify's own extraction (``math_verify.parse`` with
   ``LatexExtractionConfig(boxed_match_priority=-1)`` and ``ExprExtractionConfig()``) on the
   last ~2,000 characters.  Its patterns are tried by priority: "final answer is X" (0, 50),
   "answer: ... X" / "answer ... X" with up to 100 characters in between and the value after
   the last ``=`` (100, 200), then any LaTeX environment (``$...$``, ``\\(...\\)``, ...) or
   plain number/expression (300).  Within one priority the **rightmost** match wins, so
   "The result is 12. Then ... 7" gives 7 and a completion ending in "= 42" gives 42.  Note
   "The answer is 42. Check: 3 + 5 = 8" gives 8 (the "answer ... = X" pattern takes the value
   after the last ``=`` within 100 characters).

Equivalence (:func:`math_equal`):

- a gold that reads as a number asks for a number: both strings are read as exact fractions
  after removing currency signs, percent signs, thousands separators, ``\\text{...}`` units, a
  leading ``x =`` and a trailing period (``0.5`` = ``1/2`` = ``\\frac{1}{2}`` = ``\\dfrac12``,
  ``1,000`` = ``1000``, ``$5`` = ``5 dollars`` = ``5.``; a decimal's exponent has at most 3
  digits), and must be **equal**: no tolerance, so ``1000001`` is not 1000000 and ``1e-13`` is
  not 0.  The one exception is a decimal for a number that has no finite decimal expansion,
  which no decimal can equal: the decimal must be that number rounded or truncated at its last
  digit, with at least 6 significant digits in an answer (``0.333333`` or ``0.3333333333`` for
  ``1/3``, not ``0.333`` or ``0.333334``) and 3 in a gold (``\\frac13`` for ``0.333``,
  ``22/7`` for ``3.14``; ``0.3`` or ``0.5`` are exact).  A percent sign only the answer carries
  is dropped for a whole-number gold (``50\\%`` for 50, not ``0.5\\%`` for 0.5);
- a gold that names two or more values (``x=6, y=5``, ``x=y=0``, ``(x, y) = (6, 5)``) asks for
  every value: named (in any order: ``y=5, x=6``), or unnamed as a tuple or list in the gold's
  order (``(6, 5)``, ``6, 5``); a set, another order or fewer values are wrong (math-verify
  compares unnamed values as a set: it paid ``(5, 6)`` for ``x=6, y=5``);
- otherwise ``math_verify.verify(gold, pred)`` on both parsed answers, except that a set is not
  a tuple or an interval (``\\{1, 2\\}`` for ``(1, 2)``) and a letter in the other case is
  another letter (``a`` for ``A``), where math-verify says equal.

Time guards: math-verify uses ``signal.alarm`` timeouts, which raise outside the main
thread.  The timeout (``SIGNAL_TIMEOUT_S``) is therefore passed only when called from the
main thread (note that it cancels any ``alarm`` the caller had pending), and ``None``
elsewhere; no timeout stops a big-integer computation anyway.  In all threads the verifier's
own guards apply: inputs are capped in length, and no answer is handed to math-verify whose
numbers :func:`_digits` estimates at more than ``MAX_DIGITS`` digits: powers (digits of the
base times the exponent, so ``9^{999999 \\cdot 999999}`` and ``(9^{9})^{999999}`` count as
what they compute), factorials, Γ, binomials, ``1E+9999999``, towers such as
``10^{10^{10}}`` and factorials of computed numbers such as ``{9999!}!``; nor a text without a
box of that size that holds what math-verify's parser computes itself (a binomial, Γ, gcd,
lcm, ``1E+k``).  The numeric reading computes nothing larger than its 200-character input with an
exponent of 3 digits.  The verifier's own work is linear in the completion (one pass finds the
boxes, and only the chosen box's content is copied); math-verify is only ever handed the last
``FALLBACK_TAIL_CHARS`` characters or an answer of at most ``MAX_EXPR_CHARS`` (the gold answer
aside), so its cost is bounded whatever the length.

A verifier never raises on model output: every failure is a 0.0 with a reason.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from fractions import Fraction
from typing import Any, Callable, NamedTuple, Optional

from . import register

__all__ = [
    "SIGNAL_TIMEOUT_S",
    "boxed_contents",
    "last_boxed",
    "extract_math_answer",
    "last_answer_tag",
    "shown",
    "math_equal",
    "to_number",
    "verify_math",
]

logger = logging.getLogger(__name__)

#: math-verify's per-call timeout (seconds) when called from the main thread; None disables.
SIGNAL_TIMEOUT_S: Optional[int] = 5
#: characters of the completion searched by the no-box fallback (the tail).
FALLBACK_TAIL_CHARS = 2000
#: longest answer string handed to sympy.
MAX_EXPR_CHARS = 1000
#: most digits of the numbers (powers, factorials, Γ, binomials, ``1E+k``) that a text handed to
#: math-verify may make sympy compute, as ``_digits`` estimates them: sympy computes them exactly,
#: and no timeout stops a big-integer computation.
MAX_DIGITS = 100_000

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])([ \t]*)")
_BRACE_RE = re.compile(r"\\[\\{}]|[{}]")
_TOKEN_RE = re.compile(r"[^\s$]+")


# --------------------------------------------------------------------------- extraction


def _box_spans(text: str) -> list[tuple[int, int, int]]:
    """``(start, content start, content end)`` of every complete box of ``text``, by start.

    One linear pass: each ``\\boxed``/``\\fbox`` and the blanks after it are read once, the
    braces once (one stack), and a ``\\boxed 42`` token within 200 characters.  Only positions
    are kept, so nested boxes cost nothing more (their contents overlap).
    """
    if not isinstance(text, str) or "\\" not in text:
        return []
    openers: dict[int, int] = {}  # position of the box's "{" -> start of "\boxed"
    spans: list[tuple[int, int, int]] = []
    for m in _BOX_RE.finditer(text):
        j = m.end()
        if j < len(text) and text[j] == "{":
            openers[j] = m.start()
        elif j > m.start(1):  # "\boxed 42": the next token up to whitespace or "$"
            tok = _TOKEN_RE.match(text, j, j + 200)
            if tok:
                spans.append((m.start(), tok.start(), tok.end()))
    if openers:
        stack: list[int] = []
        for b in _BRACE_RE.finditer(text, min(openers)):
            tok = b.group(0)
            if tok == "{":
                stack.append(b.start())
            elif tok == "}" and stack:
                o = stack.pop()
                if o in openers:
                    spans.append((openers[o], o + 1, b.start()))
    spans.sort()
    return spans


def _box_content(text: str, lo: int, hi: int) -> str:
    return text[lo:hi].strip().strip("$").strip()


def boxed_contents(text: str) -> list[tuple[int, str]]:
    """All complete ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed X`` answers of ``text`` as
    ``(start, content)`` sorted by start position.

    Braces are matched with one linear scan (escaped ``\\{``/``\\}`` do not count); unclosed
    boxes are left out; contents are stripped of surrounding whitespace and ``$``.  The
    contents of nested boxes overlap, so the result can be longer than ``text``: the
    verifiers use :func:`last_boxed`, which copies one content only.
    """
    out = []
    for start, lo, hi in _box_spans(text):
        content = _box_content(text, lo, hi)
        if content:
            out.append((start, content))
    return out


def last_boxed(text: str) -> Optional[str]:
    """Content of the last complete, non-empty box in ``text``, or None.

    Linear in ``text``: the boxes are found by :func:`_box_spans` and only the contents of
    the last ones are copied (an empty box holds no other box, so those are disjoint).
    """
    for _, lo, hi in reversed(_box_spans(text)):
        content = _box_content(text, lo, hi)
        if content:
            return content
    return None


def last_outer_boxed(text: str, k: int) -> list[str]:
    """Contents of the last ``k`` non-empty boxes of ``text`` that lie inside no other box, in
    the order they appear; fewer when ``text`` has fewer. Linear in ``text``: only
    those contents are copied, and outer boxes are disjoint."""
    outer: list[tuple[int, int]] = []
    end = -1
    for start, lo, hi in _box_spans(text):  # by start: a box starting before `end` is inside one
        if start >= end:
            outer.append((lo, hi))
            end = hi
    contents: list[str] = []
    for lo, hi in reversed(outer):
        if len(contents) == k:
            break
        content = _box_content(text, lo, hi)
        if content:
            contents.append(content)
    return contents[::-1]


def _tail(text: str, n: int) -> str:
    if len(text) <= n:
        return text
    cut = len(text) - n
    m = re.compile(r"\s").search(text, cut)  # start the tail at a word boundary
    return text[m.end() :] if m and m.end() < len(text) else text[cut:]


def _timeout() -> Optional[int]:
    if SIGNAL_TIMEOUT_S and threading.current_thread() is threading.main_thread():
        return int(SIGNAL_TIMEOUT_S)
    return None


def _mv():
    import math_verify  # imported lazily: sympy/latex2sympy take ~1 s to import

    return math_verify


def _fallback_extract(text: str) -> tuple[list[Any], Optional[str]]:
    """math-verify's extraction on text without a box: (parsed list, extracted string); nothing
    for a text that holds what math-verify's parser computes (a binomial, Γ, gcd, lcm, ``1E+k``)
    and whose numbers :func:`_digits` estimates above ``MAX_DIGITS`` digits. (Its answer is
    checked by :func:`math_equal`'s guard: a text's other numbers, such as "250000!", are no
    reason to read no answer.)"""
    if _PARSER_COMPUTES_RE.search(text) and _digits(text) > MAX_DIGITS:
        return [], None
    mv = _mv()
    parsed = mv.parse(
        text,
        extraction_config=[
            mv.LatexExtractionConfig(boxed_match_priority=-1),
            mv.ExprExtractionConfig(),
        ],
        fallback_mode="first_match",
        parsing_timeout=_timeout(),
    )
    strings = [p for p in parsed if isinstance(p, str)]
    return parsed, (strings[-1] if strings else None)


def last_answer_tag(text: str) -> Optional[str]:
    """Stripped content of the last closed ``<answer>...</answer>`` (any case), or None when
    there is none or it is empty; one backward scan."""
    low = text.lower()
    close = low.rfind("</answer>")
    if close < 0:
        return None
    open_ = low.rfind("<answer>", 0, close)
    if open_ < 0:
        return None
    content = text[open_ + len("<answer>") : close].strip()
    return content or None


def _extract(completion: str) -> tuple[Optional[str], str, Optional[list[Any]]]:
    """(answer string, source, math-verify parse of it when already available)."""
    if not isinstance(completion, str) or not completion.strip():
        return None, "none", None
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed, "boxed", None
    source, text = "fallback", completion
    tag = last_answer_tag(completion)
    if tag:
        source, text = "answer tag", tag
    parsed, found = _fallback_extract(_tail(text, FALLBACK_TAIL_CHARS))
    if found is None and tag:
        return tag[:MAX_EXPR_CHARS], source, None
    if not found:
        return None, "none", None
    return found, source, parsed


def extract_math_answer(completion: str) -> tuple[Optional[str], str]:
    """The final answer string of ``completion`` and where it came from: ``"boxed"``,
    ``"answer tag"``, ``"fallback"`` or ``"none"`` (order in the module docstring).
    """
    found, source, _ = _extract(completion)
    return found, source


# --------------------------------------------------------------------------- guards


def _brackets(s: str) -> dict[int, int]:
    """Position of every matched bracket of ``s`` -> position of its partner, both ways (any
    kinds pair, as in the interval ``[0, 1)``); one pass."""
    partner: dict[int, int] = {}
    stack: list[int] = []
    for i, c in enumerate(s):
        if c in "({[":
            stack.append(i)
        elif c in ")}]" and stack:
            o = stack.pop()
            partner[o], partner[i] = i, o
    return partner


def _operand_after(s: str, i: int, partner: dict[int, int]) -> tuple[str, int]:
    """(text, end) of the operand that starts at s[i], after blanks: a bracketed group's content
    (an unclosed one runs to the end) or a token."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] in "({[":
        close = partner.get(i, len(s))
        return s[i + 1 : close], close + 1
    m = _TOKEN_AFTER_RE.match(s, i)
    return (m.group(0), m.end()) if m else ("", i)


def _operand_before(s: str, i: int, partner: dict[int, int]) -> tuple[int, str]:
    """(start, text) of the operand that ends just before s[i], before blanks: a bracketed group
    or a token (factorial signs included)."""
    while i > 0 and s[i - 1] == " ":
        i -= 1
    if i > 0 and s[i - 1] in ")}]" and i - 1 in partner:
        return partner[i - 1], s[partner[i - 1] : i]
    k = i
    while k > 0 and (s[k - 1].isalnum() or s[k - 1] in ".!"):
        k -= 1
    return k, s[k:i]


def _group_start(s: str, i: int, partner: dict[int, int]) -> int:
    """Where the content of the innermost bracketed group around s[i] starts (0 outside any)."""
    j = i - 1
    while j >= 0 and s[j] not in "({[":
        j = partner[j] - 1 if j in partner else j - 1  # a group closed before i is skipped
    return j + 1


def _bound(s: str) -> int:
    """An upper bound of any sum, product or quotient of the numbers written in ``s``."""
    return math.prod(int(d) + 1 for d in re.findall(r"[0-9]+", s))


_TOKEN_AFTER_RE = re.compile(r"[-+]?[0-9A-Za-z.]+")
_POWER_RE = re.compile(r"\s*(?:\^|\*\*)")
#: a power (``**`` with blanks on both sides or none, unlike Markdown's ``**bold**``), a factorial,
#: Γ, a binomial, a number's exponent
_COMPUTED_RE = re.compile(r"\^|(?<=\S)\*\*(?=\S)|(?<=\s)\*\*(?=\s)|\\?!(?!=)|\\[Gg]amma|binom(?:ial)?|\\choose"
                          r"|(?<=[0-9.])[eE][+-]?[0-9]+")
#: what math-verify's LaTeX parser computes itself, before any check of hista's: binomials, Γ,
#: gcd and lcm (of their arguments' values) and a number's exponent (``1E+9999999`` as a Float)
_PARSER_COMPUTES_RE = re.compile(r"binom|\\choose|\\[Gg]amma|gcd|lcm|[0-9.][eE][+-]?[0-9]")
_NESTED_RE = re.compile(r"\^|\*\*|!|binom|choose")


def _digits(s: str) -> float:
    """An upper estimate of the digits sympy computes for the numbers of ``s``: ``a^b`` has
    digits(a) * b digits, ``n!`` and ``\\Gamma(n)`` n * digits(n), ``\\binom{n}{k}`` n, ``1E+k``
    k, where a, b and n are bounded by :func:`_bound` and what is computed inside a base adds its
    own estimate to the base's; ``inf`` for a tower (``2^{3^4}``, ``2^3^4``, ``2^{100!}``) and a
    factorial or binomial of a computed number (``(10^9)!``, ``{9999!}!``, ``9999!!``). Text is
    no number: Markdown's ``**42**`` or a ``^`` without a base or an exponent is no power, and
    ``Wow!!`` no factorial."""
    partner = _brackets(s)
    found: list[tuple[int, int]] = []  # (position, estimate) of each number computed so far
    for m in _COMPUTED_RE.finditer(s):
        op, at = m.group(0), m.start()
        if op in ("^", "**"):
            exponent, end = _operand_after(s, m.end(), partner)
            start, base = _operand_before(s, at, partner)
            if not base or not exponent:
                continue
            if _NESTED_RE.search(exponent) or _POWER_RE.match(s, end):
                return math.inf
            inner = sum(d for where, d in found if where >= start)
            found.append((at, (len(str(_bound(base))) + inner) * _bound(exponent)))
            continue
        if op[0] in "eE":
            found.append((at, int(op.lstrip("eE+-"))))
            continue
        if op.endswith("!"):
            n = _operand_before(s, at, partner)[1]
        elif op == "\\choose":  # {n \choose k}
            n = s[_group_start(s, at, partner) : at]
        else:  # \binom{n}{k}, binomial(n, k), \Gamma(n)
            n = _operand_after(s, m.end(), partner)[0]
        if _NESTED_RE.search(n) and re.search(r"[0-9]", n):
            return math.inf
        bound = _bound(n)
        found.append((at, bound if "binom" in op or op == "\\choose" else bound * len(str(bound))))
    return sum(d for _, d in found)


def _too_expensive(s: str) -> bool:
    """True for strings sympy may take minutes (or unbounded memory) to evaluate: longer than
    ``MAX_EXPR_CHARS``, or whose numbers :func:`_digits` estimates above ``MAX_DIGITS`` digits."""
    return len(s) > MAX_EXPR_CHARS or _digits(s) > MAX_DIGITS


# --------------------------------------------------------------------------- numbers

_TEXT_CMD_RE = re.compile(
    r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}"
)
_FRAC_RE = re.compile(r"^([+-]?)\\frac\s*\{\s*([^{}]+?)\s*\}\s*\{\s*([^{}]+?)\s*\}$")
_FRAC_SHORT_RE = re.compile(r"^([+-]?)\\frac\s*(\d)\s*(\d)$")
_SLASH_RE = re.compile(r"^([+-]?\d+(?:\.\d+)?)\s*/\s*([+-]?\d+(?:\.\d+)?)$")
#: an exponent has at most 3 digits: ``Fraction`` computes 10**exponent exactly, and no timeout
#: stops it (``1e999999999`` would take hours)
_DECIMAL_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,3})?$")
_PLACES_RE = re.compile(r"[+-]?[\d,]*\.(\d+)")
_THOUSANDS_RE = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_CURRENCY = "$€£¥₹"
#: significant digits a decimal must show to stand for a number without a finite decimal expansion
#: (:func:`_rounds`): an answer's 0.333333 for 1/3 (as precise as the former relative tolerance of
#: 1e-6), a gold's 0.333 or 3.14 (fewer, as 0.5 or 0.33, are taken as exact)
ROUNDED_ANSWER_DIGITS = 6
ROUNDED_GOLD_DIGITS = 3


class _Number(NamedTuple):
    """An answer read as a number: its exact value, its decimal places when written as a decimal
    with a point (``0.250``: 3; else None), and whether it carried a percent sign."""

    value: Fraction
    places: Optional[int]
    percent: bool


def _plain_number(s: str) -> Optional[Fraction]:
    s = s.strip()
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    if _DECIMAL_RE.match(s):
        return Fraction(s)
    m = _SLASH_RE.match(s)
    if m:
        den = Fraction(m.group(2))
        return Fraction(m.group(1)) / den if den else None
    return None


def _read_number(s: Any) -> Optional[_Number]:
    """:func:`to_number`'s reading, with the decimal places and the percent sign."""
    if not isinstance(s, str) or len(s) > 200:
        return None
    t = s.strip()
    for _ in range(3):
        t = _TEXT_CMD_RE.sub(lambda m: " " + m.group(1) + " ", t)
    t = re.sub(r"\\(?:left|right|displaystyle)\b", "", t)
    t = re.sub(r"\\[,;:!]|\\ |~", " ", t)
    t = t.replace("{,}", ",").replace("\\$", "$").replace("\\%", "%")
    t = re.sub(r"\\[dt]frac", r"\\frac", t)
    t = re.sub(r"\^\s*\{?\s*\\circ\s*\}?|°", "", t)
    t = t.strip().strip("$").strip()
    t = re.sub(r"^[A-Za-z][A-Za-z0-9_]*\s*=\s*", "", t)  # "x = 5"
    percent = "%" in t
    t = t.replace("%", " ")
    for ch in _CURRENCY:
        t = t.replace(ch, " ")
    t = t.strip()
    t = re.sub(r"(?:\s+[A-Za-z]{2,}\.?)+$", "", t)  # trailing unit words: "5 dollars"
    t = re.sub(r"\.$", "", t.strip()).strip()
    while t.startswith("{") and t.endswith("}"):
        t = t[1:-1].strip()
    if not t:
        return None
    try:
        v = _plain_number(t)
        if v is None:
            m = _FRAC_RE.match(t) or _FRAC_SHORT_RE.match(t)
            if not m:
                return None
            num, den = _plain_number(m.group(2)), _plain_number(m.group(3))
            if num is None or not den:
                return None
            v = -num / den if m.group(1) == "-" else num / den
    except (ValueError, ZeroDivisionError, ArithmeticError):
        return None
    places = _PLACES_RE.fullmatch(t)
    return _Number(v, len(places.group(1)) if places else None, percent)


def to_number(s: Any) -> Optional[Fraction]:
    """Read an answer string as an exact number, or None (SPEC §6 numeric fallback).

    Accepts integers, decimals (an exponent of at most 3 digits: ``1e-3``, not ``1e9999``),
    ``a/b``, ``\\frac{a}{b}`` (also ``\\dfrac``, ``\\tfrac``, ``\\frac12``), thousands separators
    (``1,000``, ``1{,}000``), currency signs, ``%``, degree signs, ``\\text{...}`` units or a
    trailing unit word (``5 dollars``), a leading ``x =`` and a trailing period.
    """
    number = _read_number(s)
    return None if number is None else number.value


def _terminates(x: Fraction) -> bool:
    """Whether ``x`` has a finite decimal expansion (1/4 does, 1/3 does not)."""
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _rounds(decimal: _Number, exact: Fraction, digits: int) -> bool:
    """Whether ``decimal``, written with a point and at least ``digits`` significant digits, is
    ``exact`` rounded or truncated at its last digit, ``exact`` having no finite decimal
    expansion (so that no decimal equals it): 0.333333 and 0.3333333333 for 1/3, not 0.333334."""
    if decimal.places is None or _terminates(exact):
        return False
    scale = 10**decimal.places
    shown = decimal.value * scale  # the digits as an integer: 0.3330 -> 3330
    if len(str(abs(shown.numerator))) < digits:
        return False
    return shown in (math.trunc(exact * scale), round(exact * scale))


def _numbers_equal(gold: Optional[_Number], pred: Optional[_Number]) -> bool:
    """Exact equality, except a decimal for a number it cannot write exactly (:func:`_rounds`); a
    percent sign the gold does not carry is dropped only for a whole-number gold (``50\\%`` for 50,
    not ``0.5\\%`` for 0.5)."""
    if gold is None or pred is None:
        return False
    if pred.percent and not gold.percent and gold.value.denominator != 1:
        return False
    return (gold.value == pred.value or _rounds(pred, gold.value, ROUNDED_ANSWER_DIGITS)
            or _rounds(gold, pred.value, ROUNDED_GOLD_DIGITS))


# --------------------------------------------------------------------------- equivalence


def _parse_answer(s: str) -> list[Any]:
    """math-verify parse of one answer string (a box content or a gold answer)."""
    mv = _mv()
    return mv.parse(
        "\\boxed{" + s + "}",
        extraction_config=[mv.LatexExtractionConfig()],
        fallback_mode="first_match",
        parsing_timeout=_timeout(),
    )


def _clean(s: str) -> str:
    s = s.strip()
    if "\\boxed" in s or "\\fbox" in s:
        s = last_boxed(s) or s
    s = s.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$").strip()
    return s


_SPACING_RE = re.compile(r"\\[,;:! ]|\\q?quad\b|~")
_AND_RE = re.compile(r"\\text\s*\{\s*and\s*\}|\band\b")
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right)\b")
_NAME_RE = re.compile(r"[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?")  # x, a_1, x_{12}


def _parts(s: str) -> list[str]:
    """``s`` split at its commas, semicolons and "and"s outside brackets, LaTeX spacing removed."""
    s = _AND_RE.sub(",", _SPACING_RE.sub(" ", s))
    parts, depth, last = [], 0, 0
    for i, c in enumerate(s):
        depth += (c in "({[") - (c in ")}]")
        if c in ",;" and depth == 0:
            parts.append(s[last:i].strip())
            last = i + 1
    return parts + [s[last:].strip()]


def _inside(s: str) -> Optional[str]:
    """What ``s`` holds when it is one group in parentheses or square brackets, else None."""
    s = _LEFT_RIGHT_RE.sub("", s).strip()
    return s[1:-1] if s[:1] in "([" and _brackets(s).get(0) == len(s) - 1 else None


def _shape(s: str) -> Optional[str]:
    """``"set"`` for ``\\{1, 2\\}``, ``"tuple"`` for ``(1, 2)`` or ``[1, 2)`` (a point or an
    interval), else None (``1, 2``, ``(x+1)^2``)."""
    t = _LEFT_RIGHT_RE.sub("", s).strip()
    if t.startswith("\\{") and _brackets(t).get(1) == len(t) - 1:
        return "set"
    inside = _inside(t)
    return "tuple" if inside is not None and len(_parts(inside)) > 1 else None


def _system(s: str) -> Optional[list[tuple[str, str]]]:
    """The (name, value) pairs of an answer that names its values (``x=6, y=5``, ``x=y=0``,
    ``(x, y) = (6, 5)``), in order; None for any other answer."""
    pairs: list[tuple[str, str]] = []
    for part in _parts(s):
        sides = [side.strip() for side in part.split("=")]
        names = _inside(sides[0])
        if len(sides) == 2 and names is not None:  # (x, y) = (6, 5)
            names, values = _parts(names), _parts(_inside(sides[1]) or "")
        else:
            names, values = sides[:-1], sides[-1:] * (len(sides) - 1)
        if not names or len(names) != len(values) or not all(_NAME_RE.fullmatch(n) for n in names):
            return None
        pairs += zip(names, values)
    return pairs


def _system_equal(gold: list[tuple[str, str]], pred: str) -> bool:
    """Whether ``pred`` gives every value of the named ``gold``: by name, in any order, or as
    a tuple or list of values in the gold's order. A set, values in another order, or fewer
    values (``0`` for ``x=y=0``) say nothing of which name has which value."""
    named = _system(pred)
    if named is not None:
        if sorted(name for name, _ in named) != sorted(name for name, _ in gold):
            return False
        values = [dict(named)[name] for name, _ in gold]
    else:
        inside = _inside(pred)
        values = _parts(pred if inside is None else inside)
    return len(values) == len(gold) and all(math_equal(g, p) for (_, g), p in zip(gold, values))


def _letters(s: str) -> set[str]:
    """The letters of ``s`` outside LaTeX command names and ``\\text{...}``-like groups."""
    return set(re.findall(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", " ", _TEXT_CMD_RE.sub(" ", s))))


def _other_case(gold: str, pred: str) -> bool:
    """Whether ``pred`` writes a letter of ``gold`` in the other case only (math-verify pays
    ``a`` for ``A``)."""
    letters = _letters(gold)
    return any(c not in letters and c.swapcase() in letters for c in _letters(pred))


def math_equal(gold: str, pred: str, *, pred_parsed: Optional[list[Any]] = None) -> bool:
    """Whether answer string ``pred`` equals ``gold`` (the module docstring). A gold
    answer that is a number asks for a number: ``pred`` must read as one (``1 + 3`` or ``2^2``
    for 4 restates a computation instead of doing it, and is not equal), equal to it exactly
    but for a decimal that rounds a number without a finite decimal expansion (``0.333333`` for
    ``1/3``). A gold that names its values (``x=6, y=5``) asks for them by name or in its order.
    Otherwise math-verify's symbolic equivalence decides, but a set is not a tuple or an interval
    and ``a`` is not ``A``.

    ``pred_parsed`` is math-verify's parse of ``pred`` when the caller already has it.
    """
    gold, pred = _clean(gold), _clean(pred)
    if not gold or not pred:
        return False
    number = _read_number(gold)
    if number is not None:
        return _numbers_equal(number, _read_number(pred))
    if _too_expensive(gold) or _too_expensive(pred):
        return False
    system = _system(gold)
    if system is not None and len(system) > 1 and len({name for name, _ in system}) == len(system):
        return _system_equal(system, pred)
    if {_shape(gold), _shape(pred)} == {"set", "tuple"} or _other_case(gold, pred):
        return False
    mv = _mv()
    g = _parse_answer(gold)
    p = pred_parsed if pred_parsed else _parse_answer(pred)
    if not g or not p:
        return False
    return bool(mv.verify(g, p, timeout_seconds=_timeout()))


def shown(s: str, n: int = 60) -> str:
    """``s`` on one line, at most ``n`` characters (an answer quoted in a verifier's reason)."""
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


def _never_raises(name: str) -> Callable[[Callable[[Any, Any], tuple[float, str]]], Callable]:
    """A verifier body made safe on model output: an error scores 0.0 with its reason,
    math-verify's timeout (a BaseException) scores 0.0 as ``timeout``."""
    def wrap(body: Callable[[Any, Any], tuple[float, str]]) -> Callable[[Any, Any], tuple[float, str]]:
        @functools.wraps(body)
        def verifier(completion: Any, answer: Any) -> tuple[float, str]:
            try:
                return body(completion, answer)
            except Exception as exc:  # never let model output crash training
                logger.debug("%s verifier error", name, exc_info=True)
                return 0.0, f"verifier error: {type(exc).__name__}"
            except BaseException as exc:
                if type(exc).__name__ == "TimeoutException":  # math-verify's (a BaseException)
                    return 0.0, "timeout"
                raise
        return verifier
    return wrap


@register("math")
@_never_raises("math")
def verify_math(completion: Any, answer: Any) -> tuple[float, str]:
    """Score a math completion against the gold ``answer``: 1.0 if the extracted final answer
    (last box, else math-verify's fallback extraction) is equivalent, else 0.0; with a reason.
    Never raises on malformed input.
    """
    if not isinstance(completion, str):
        return 0.0, "completion is not a string"
    if isinstance(answer, (int, float, Fraction)) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str) or not _clean(answer):
        return 0.0, "invalid gold answer"
    pred, source, parsed = _extract(completion)
    if pred is None:
        return 0.0, "no answer found"
    if math_equal(answer, pred, pred_parsed=parsed):
        return 1.0, "correct"
    if _too_expensive(_clean(pred)):
        return 0.0, f"answer too complex to check: got {shown(pred)}"
    if to_number(_clean(answer)) is not None and to_number(_clean(pred)) is None:
        return 0.0, f"the answer is not a number: got {shown(pred)}"
    return 0.0, f"wrong answer: got {shown(pred)}"


@register("math-boxed")
@_never_raises("math-boxed")
def verify_math_boxed(completion: Any, answer: Any) -> tuple[float, str]:
    """``math`` for problems that ask for the answer in ``\\boxed{}`` (CHAMP's): only a
    complete box (or an ``<answer>`` tag) is read, never the fallback's last number of the text,
    which in an unfinished derivation is whatever number came last (``c^2`` read as 2)."""
    if isinstance(completion, str) and last_boxed(completion) is None and last_answer_tag(completion) is None:
        return 0.0, "no boxed answer found"
    return verify_math(completion, answer)


#: a numbered item's marker at the start of a line: "1." / "1)" / "(1)" (not "1.5")
_ITEM = re.compile(r"^[ \t]*(?:\(\s*([1-9])\s*\)|([1-9])[.)](?![0-9]))", re.MULTILINE)
#: where a list ends after its last marker: a blank line, then a line that starts unindented
#: (one blank line matched, the last of a run: no nested repetition, so no backtracking over runs)
_LIST_END = re.compile(r"\n[ \t]*\n(?=[^ \t\n])")
_SPACE = re.compile(r"\s*")


def numbered_items(text: str, k: int) -> list[str]:
    """The texts of items 1..k of a numbered list in ``text`` (markers "1." / "1)" / "(1)" at
    the start of a line), without their markers: item j is the first marker j after item
    j - 1's, and runs to the next marker of any number; an item that no marker follows runs to
    the end of the list (a blank line, then an unindented line, as in Markdown) or of the text,
    so a closing line after the list ("The final answer is 11.") is not the last item's answer
    (issue 65). Fewer items when the list stops short. Linear in ``text``: one scan
    finds the markers, one more the end of the list."""
    markers = [(m.start(), m.end(), int(m.group(1) or m.group(2))) for m in _ITEM.finditer(text)]
    items: list[str] = []
    for i, (_, end, number) in enumerate(markers):
        if number == len(items) + 1:
            stop = markers[i + 1][0] if i + 1 < len(markers) else _list_end(text, end)
            items.append(text[end:stop])
            if len(items) == k:
                break
    return items


def _list_end(text: str, start: int) -> int:
    """Where the list whose last item starts at ``start`` ends: at the first blank line after the
    item's first written character that an unindented line follows (the item keeps any blank
    lines before it), else the end of ``text``."""
    end = _LIST_END.search(text, _SPACE.match(text, start).end())
    return end.start() if end else len(text)


def _item_answer(item: str) -> tuple[Optional[str], Optional[list[Any]]]:
    """An item's answer: its last box, else math-verify's extraction on its tail."""
    boxed = last_boxed(item)
    if boxed is not None:
        return boxed, None
    parsed, found = _fallback_extract(_tail(item, FALLBACK_TAIL_CHARS))
    return found, parsed


def _parts_checked(completion: Any, answer: Any) -> tuple[Optional[list[str]], str]:
    """Each part's verdict for a completion that answers several problems in order: a list of
    ``"correct"`` or why the part is wrong (``"part k wrong: got X"``, ``"part k: no answer
    found"``), one per gold answer of ``answer`` (joined by ``;``); or None with the reason when
    no part can be read (a malformed gold answer, fewer answers than parts). The answers are the
    last N boxes that lie in no other box, in order; with fewer boxes, the answers of the
    numbered items 1..N (:func:`numbered_items`: each item's last box, else math-verify's
    extraction on the item, as ``math`` reads a completion without a box). Boxes before the last
    N, and items after a list's first N, do not count, so a completion gains nothing by writing
    several guesses."""
    if not isinstance(completion, str):
        return None, "completion is not a string"
    golds = [part.strip() for part in answer.split(";")] if isinstance(answer, str) else []
    if not golds or not all(_clean(gold) for gold in golds):
        return None, "invalid gold answer"
    preds: list[tuple[Optional[str], Optional[list[Any]]]] = [
        (box, None) for box in last_outer_boxed(completion, len(golds))]
    if len(preds) < len(golds):
        items = numbered_items(completion, len(golds))
        if len(items) < len(golds):
            return None, f"{len(preds)} boxed answers and {len(items)} numbered items for {len(golds)} parts"
        preds = [_item_answer(item) for item in items]
    return [f"part {k}: no answer found" if pred is None
            else "correct" if math_equal(gold, pred, pred_parsed=parsed)
            else f"part {k} wrong: got {shown(pred)}"
            for k, (gold, (pred, parsed)) in enumerate(zip(golds, preds), start=1)], ""


@register("math-parts")
@_never_raises("math-parts")
def verify_math_parts(completion: Any, answer: Any) -> tuple[float, str]:
    """Score a completion that answers several problems in order (``builtin:arith?parts=N``):
    ``answer`` is the parts' gold answers joined by ``;``, read as :func:`_parts_checked` reads
    them. 1.0 only if every part equals its gold answer (all or nothing), else 0.0 with the
    first wrong part; never raises."""
    verdicts, reason = _parts_checked(completion, answer)
    if verdicts is None:
        return 0.0, reason
    wrong = next((v for v in verdicts if v != "correct"), None)
    return (0.0, wrong) if wrong else (1.0, "correct")


@register("math-parts-share")
@_never_raises("math-parts-share")
def verify_math_parts_share(completion: Any, answer: Any) -> tuple[float, str]:
    """Score a completion that answers several problems in order
    (``builtin:arith?parts=N&score=share``) by the share of its parts that equal their gold
    answers: k of N right pays k / N (partial credit, each part read as ``math-parts`` reads
    it, so extra guesses gain nothing); 0.0 when no part can be read. The reason names the
    first wrong part. Never raises."""
    verdicts, reason = _parts_checked(completion, answer)
    if verdicts is None:
        return 0.0, reason
    right = sum(v == "correct" for v in verdicts)
    wrong = next((v for v in verdicts if v != "correct"), None)
    return right / len(verdicts), (f"{right} of {len(verdicts)} parts right; {wrong}" if wrong else "correct")
