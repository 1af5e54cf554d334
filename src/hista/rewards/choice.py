"""Multiple-choice verifier: the chosen option letter.

The gold answer is a letter (``"B"``; ``"(b)"`` and ``"B) text"`` are read as ``B``).  The
model's choice is taken from, in order:

1. the last complete ``\\boxed{...}``: ``\\boxed{B}``, ``\\boxed{(B)}``, ``\\boxed{B) 42}``,
   ``\\boxed{\\text{B}}`` (a lone lower-case letter in a box is accepted too);
2. the last answer phrase: "answer is B", "Answer: (B)", "the correct option is **C**",
   "final answer: $D$", "I choose (b)", "答案是 B";
3. the last bold letter: ``**B**``, ``**(B)**``, ``**B) ...``;
4. the last "option B" / "choice (B)";
5. a last line that is only a letter: ``B``, ``(B).``;
6. the last option token ``(B)`` or ``B)`` in the final 300 characters.

Lower-case letters count only where unambiguous: in parentheses or alone in a box ("the
answer is a number" is not option A).  Letters range over A-J (MMLU-Pro has ten options),
extended up to the gold letter when it is later in the alphabet.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Optional

from . import register
from .math import last_boxed

__all__ = ["extract_choice", "verify_choice"]

logger = logging.getLogger(__name__)

_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_TAIL_CHARS = 300


def _letters(gold: Optional[str]) -> str:
    last = max("J", gold or "J")
    return "".join(chr(c) for c in range(ord("A"), ord(last) + 1))


def _gold_letter(answer: Any) -> Optional[str]:
    if not isinstance(answer, str):
        return None
    s = _TEXT_CMD_RE.sub(r"\1", answer).strip().strip("$").strip()
    m = re.fullmatch(r"[(\[]?\s*([A-Za-z])\s*[)\]]?(?:[.:)]\s*.*)?", s, re.DOTALL)
    return m.group(1).upper() if m else None


def _from_box(content: str, letters: str) -> Optional[str]:
    s = content
    for _ in range(3):
        s = _TEXT_CMD_RE.sub(r"\1", s)
    s = s.replace("{", "").replace("}", "").strip().strip("$").strip()
    m = re.fullmatch(rf"\(?\s*([{letters}{letters.lower()}])\s*\)?\.?", s)
    if m:  # a lone letter, either case
        return m.group(1).upper()
    m = re.match(rf"(?:\(\s*([{letters}])\s*\)|([{letters}])\s*[).:])", s)
    if m:  # "B) 42", "(B) 42", "B. 42"
        return (m.group(1) or m.group(2)).upper()
    return None


def _last(pattern: re.Pattern, text: str) -> Optional[str]:
    found = None
    for m in pattern.finditer(text):
        g = next((x for x in m.groups() if x), None)
        if g:
            found = g.upper()
    return found


def _patterns(letters: str) -> dict[str, re.Pattern]:
    # Linear time: no two ``\s*`` are adjacent (each optional token takes the blanks before
    # it, and no token starts with a blank), so a run of whitespace is read a fixed number of
    # times per match attempt, never split in all possible ways.
    up, low = letters, letters.lower()
    letter = (
        rf"(?:\s*(?:\*\*|__|\$|\\textbf\{{|\\text\{{))?\s*"
        rf"(?:\(([{up}{low}])\)|\[([{up}])\]|([{up}])(?![A-Za-z0-9]))"
    )
    phrase = (
        r"(?i:\b(?:final\s+)?answer\b|\bcorrect\s+(?:option|choice|answer)\b|"
        r"\b(?:choose|select|pick)\b|答案(?:是|为)?)"
        r"(?:\s*(?i:is|would\s+be|will\s+be|should\s+be|must\s+be)\b)?"
        r"(?:\s*[:=\-：])?(?:\s*(?i:(?:option|choice)\b))?"
    )
    option = r"(?i:\b(?:option|choice)\b)"
    return {
        "phrase": re.compile(phrase + letter),
        "option": re.compile(option + letter),
        "bold": re.compile(
            rf"\*\*\s*\(?([{up}])\)?[.:]?\s*\*\*|\*\*\s*\(([{up}])\)|\*\*\s*([{up}])\)"
        ),
        "line": re.compile(rf"^[\s*_#>`$]*(?:\(([{up}{low}])\)|([{up}]))[\s*_.`$:)]*$"),
        "token": re.compile(rf"(?<![A-Za-z0-9])\(([{up}{low}])\)|(?<![A-Za-z0-9(])([{up}])\)"),
    }


def extract_choice(completion: str, letters: str = "ABCDEFGHIJ") -> Optional[str]:
    """The option letter chosen in ``completion`` (upper case), or None (rules in
    the module docstring).  ``letters`` are the allowed option letters."""
    if not isinstance(completion, str) or not completion.strip():
        return None
    box = last_boxed(completion)
    if box is not None:
        got = _from_box(box, letters)
        if got:
            return got
    pats = _patterns(letters)
    text = completion[-20000:]
    for name in ("phrase", "bold", "option"):
        got = _last(pats[name], text)
        if got:
            return got
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines:
        m = pats["line"].match(lines[-1])
        if m:
            return next(x for x in m.groups() if x).upper()
    return _last(pats["token"], text[-_TAIL_CHARS:])


@register("choice")
def verify_choice(completion: Any, answer: Any) -> tuple[float, str]:
    """Score a multiple-choice completion: 1.0 if the extracted letter equals the gold letter
    ``answer``, else 0.0; with a reason.  Never raises on malformed input."""
    try:
        if not isinstance(completion, str):
            return 0.0, "completion is not a string"
        gold = _gold_letter(answer)
        if gold is None:
            return 0.0, f"invalid gold answer: {str(answer)[:40]!r}"
        got = extract_choice(completion, _letters(gold))
        if got is None:
            return 0.0, "no choice found"
        if got == gold:
            return 1.0, "correct"
        return 0.0, f"wrong answer: got {got}"
    except Exception as exc:  # never let model output crash training
        logger.debug("choice verifier error", exc_info=True)
        return 0.0, f"verifier error: {type(exc).__name__}"
