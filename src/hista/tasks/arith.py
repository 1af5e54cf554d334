"""Built-in task ``builtin:arith``: multi-step arithmetic rich in intermediate numbers.

Each problem starts from a number and applies ``steps`` operations drawn from ``ops``; every
intermediate result (and the answer) is a positive integer, so word problems always count
real objects.  Knobs, given as ``builtin:arith?steps=3&max_value=20&ops=+-*&style=plain``:

* ``steps``: number of operations (1..20, default 2);
* ``max_value``: largest operand of ``+``/``-`` and largest start value (2..1000000, default 10;
  a start followed directly by L subtractions may reach max_value + L so they fit);
  multipliers are single digits, 2..min(max_value, 9), so products stay readable;
* ``ops``: the operations used, a subset of ``+-*`` (default ``+-``);
* ``explain``: ``yes`` appends a request for a detailed, checked explanation (default ``no``);
  the embedded model then writes about 170 tokens on median instead of about 30 (the ``long``
  SVEB preset);
* ``style``: ``word`` (a short story with a named person and objects), ``plain``
  ("Start with 7. Add 5. Then multiply by 2. What number do you get?") or ``expr``
  ("What is (7 + 5) * 2?", evaluated left to right), default ``plain``.
* ``parts``: how many independent problems one prompt poses (1..9, default 1; a numbered item
  is read by its one-digit marker). With 2 or
  more the problem is a numbered list of them, to be answered in order, each in its own
  ``\boxed{}``; the answer is the parts' answers joined by ``"; "`` and the verifier
  ``math-parts`` (the last N boxes, else the response's numbered items 1..N, the form the
  embedded model writes) pays 1 only when every part is right (all or nothing: a response with some
  parts right and one wrong scores 0, the case where one advantage per response punishes the
  right parts);
* ``score``: with ``parts`` of 2 or more, ``all`` (the default, ``math-parts``) or ``share``
  (``math-parts-share``: k of N parts right pays k / N, so a response's right parts earn
  reward beside its wrong ones; issue 65, amendment 4).

Measured on the embedded SmolLM2-135M-Instruct at temperature 0.7 (16 problems x 8 rollouts,
``bench/difficulty.py``, then ``bench/arith_difficulty.py``): plain ``steps=1`` 0.32, ``expr``
``steps=1`` 0.34, the default plain ``steps=2`` 0.08-0.11, ``steps=3`` 0.06, ``word``
``steps=1`` 0.08; larger models want larger ``steps`` and ``max_value``. With ``parts``
(``ops=+``, ``steps=1``, 12 problems x 8, 128 tokens): ``expr`` ``parts=3&max_value=5`` 0.20,
``expr`` ``parts=2&max_value=10`` 0.18, ``parts=3&max_value=10`` 0.06, plain
``parts=2&max_value=10`` 0.07; the model numbers its answers and rarely boxes them, so before
``math-parts`` read numbered items every setting scored 0.

With subtraction the answers are skewed toward 1 (every result stays >= 1): 25% of
``steps=1`` and 20% of ``steps=2`` problems at the default ``max_value`` have the answer 1, so a
policy that always answers 1 scores about that much, and a difficulty filter keeps such
problems (``results/train-pilot``). ``ops=+`` with a larger ``max_value`` spreads the answers
(``steps=1&ops=+&max_value=30``: none in more than 5.4%), but small settings have few distinct
problems (that one about 900 in all; its splits share none).

Records have ``verifier="math"``, ``field="number"`` and ``meta`` with ``steps``, ``start``,
``ops``, ``operands``, ``intermediates`` (the result after each operation; the last one is the
answer) and a worked ``solution``; with ``parts`` > 1, ``verifier="math-parts"`` and ``meta``
holds ``parts``, a list of those per part.
"""

from __future__ import annotations

import random
from typing import Optional

from hista.errors import InputError
from hista.tasks._common import (
    EXPLAIN,
    Knob,
    canonical_split,
    check_count,
    check_seed,
    generate,
    int_in,
    one_of,
    parse_options,
)

NAME = "arith"
DESCRIPTION = (
    "multi-step arithmetic (word stories or plain steps) with non-negative integer "
    "intermediates; options steps, max_value, ops, style, parts, score"
)
FIELD = "number"
DEFAULT_N = 1000
MUL_MAX = 9
_OP_CODE = {"+": "a", "-": "s", "*": "m"}


def _parse_ops(raw: str) -> str:
    if not raw:
        raise ValueError("must name at least one of + - *")
    bad = sorted(set(raw) - set(_OP_CODE))
    if bad:
        raise ValueError(f"unknown operation(s) {''.join(bad)!r}; use a subset of '+-*'")
    return "".join(op for op in "+-*" if op in raw)


KNOBS = {
    "steps": Knob(int_in(1, 20), 2, "number of operations, integer 1..20"),
    "max_value": Knob(int_in(2, 1_000_000), 10, "largest operand, integer 2..1000000"),
    "ops": Knob(_parse_ops, "+-", "subset of '+-*'"),
    "style": Knob(one_of("word", "plain", "expr"), "plain", "'word', 'plain' or 'expr'"),
    "explain": EXPLAIN,
    "parts": Knob(int_in(1, 9), 1, "independent problems per prompt, integer 1..9"),
    "score": Knob(one_of("all", "share"), "all", "'all' (every part right) or 'share' (the share of parts right)"),
}
#: how a prompt of several parts asks for its answers
PARTS_TEXT = "Solve the {n} problems below. Give the answers in order, each in its own \\boxed{{}}."
#: what ``explain=yes`` appends to a problem: asks for a worked explanation (long responses)
EXPLAIN_TEXT = (" Explain your reasoning in detail: restate the problem, work through it step by step, "
                "and check your answer before writing it in \\boxed{}.")

# (name, subject pronoun, object pronoun)
_PEOPLE = [
    ("Mia", "she", "her"), ("Ana", "she", "her"), ("Lily", "she", "her"),
    ("Emma", "she", "her"), ("Sara", "she", "her"), ("Zoe", "she", "her"),
    ("Nina", "she", "her"), ("Rosa", "she", "her"), ("Amy", "she", "her"),
    ("Kate", "she", "her"), ("Tom", "he", "him"), ("Ben", "he", "him"),
    ("Sam", "he", "him"), ("Leo", "he", "him"), ("Max", "he", "him"),
    ("Jack", "he", "him"), ("Omar", "he", "him"), ("Luis", "he", "him"),
    ("Ravi", "he", "him"), ("Dan", "he", "him"),
]
# (singular, plural, edible)
_OBJECTS = [
    ("apple", "apples", True), ("cookie", "cookies", True), ("egg", "eggs", True),
    ("candy", "candies", True), ("orange", "oranges", True), ("pencil", "pencils", False),
    ("marble", "marbles", False), ("book", "books", False), ("stamp", "stamps", False),
    ("shell", "shells", False), ("sticker", "stickers", False), ("coin", "coins", False),
    ("card", "cards", False), ("toy car", "toy cars", False), ("ball", "balls", False),
    ("flower", "flowers", False),
]
_ADD = [
    "{s} buys {b} more {noun}.",
    "{s} finds {b} more {noun}.",
    "{f} gives {o} {b} more {noun}.",
    "{s} gets {b} more {noun}.",
]
_SUB = [
    "{s} gives {b} {noun} to {f}.",
    "{s} loses {b} {noun}.",
    "{s} sells {b} {noun}.",
]
_SUB_EDIBLE = _SUB + ["{s} eats {b} {noun}."]
_MUL = ["{s} has {b} times as many {plural} as before."]


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _draw_numbers(rng: random.Random, steps: int, max_value: int, ops: str):
    """Draw (start, ops, operands, intermediates) with every result >= 1, or None."""
    seq = [rng.choice(ops) for _ in range(steps)]
    # run_after[k]: how many subtractions follow step k directly; the result of step k must
    # leave room for them (each takes at least 1 and must leave at least 1).
    run_after = [0] * steps
    for k in range(steps - 2, -1, -1):
        run_after[k] = run_after[k + 1] + 1 if seq[k + 1] == "-" else 0
    lead = (1 + run_after[0]) if seq[0] == "-" else 0
    start = rng.randint(1 + lead, max_value + lead)
    cur, operands, inter = start, [], []
    for k, op in enumerate(seq):
        need = 1 + run_after[k]
        if op == "+":
            lo, hi = max(1, need - cur), max_value
        elif op == "-":
            lo, hi = 1, min(max_value, cur - need)
        else:
            lo, hi = max(2, -(-need // cur)), min(max_value, MUL_MAX)
        if lo > hi:
            return None
        b = rng.randint(lo, hi)
        cur = cur + b if op == "+" else cur - b if op == "-" else cur * b
        operands.append(b)
        inter.append(cur)
    return start, seq, operands, inter


def _plain_text(start: int, seq: list[str], operands: list[int]) -> str:
    parts = [f"Start with {start}."]
    for k, (op, b) in enumerate(zip(seq, operands)):
        verb = {"+": f"add {b}", "-": f"subtract {b}", "*": f"multiply by {b}"}[op]
        parts.append(_cap(verb) + "." if k == 0 else f"Then {verb}.")
    parts.append("What number do you get?")
    return " ".join(parts)


def _expr_text(start: int, seq: list[str], operands: list[int]) -> str:
    expr = str(start)
    for op, b in zip(seq, operands):
        if op == "*" and ("+" in expr or "-" in expr):
            expr = f"({expr})"
        expr = f"{expr} {op} {b}"
    return f"What is {expr}?"


def _word_text(rng: random.Random, start: int, seq: list[str], operands: list[int]) -> str:
    name, s, o = rng.choice(_PEOPLE)
    friend = rng.choice([p for p in _PEOPLE if p[0] != name])[0]
    sing, plural, edible = rng.choice(_OBJECTS)

    def noun(k: int) -> str:
        return sing if k == 1 else plural

    parts = [f"{name} has {start} {noun(start)}."]
    for k, (op, b) in enumerate(zip(seq, operands)):
        pool = _ADD if op == "+" else (_SUB_EDIBLE if edible else _SUB) if op == "-" else _MUL
        body = rng.choice(pool).format(s=s, o=o, f=friend, b=b, noun=noun(b), plural=plural)
        if k > 0:
            body = "Then " + body
        elif op == "*":
            body = "Now " + body
        parts.append(_cap(body))
    parts.append(f"How many {plural} does {name} have now?")
    return " ".join(parts)


def _solution(start: int, seq: list[str], operands: list[int], inter: list[int]) -> str:
    cur, lines = start, []
    for op, b, r in zip(seq, operands, inter):
        lines.append(f"{cur} {op} {b} = {r}.")
        cur = r
    return " ".join(lines)


def load(spec: str, query: str, n: Optional[int] = None, seed: int = 0,
         split: str = "test") -> list[dict]:
    """Generate ``n`` arithmetic problems (default 1000) for ``split``.

    Deterministic in (options, seed, split, index); ids look like
    ``arith-s2-m20-as-word-seed0-test-00017`` (s=steps, m=max_value, ops as a=+ s=- m=*).
    """
    opts = parse_options(spec, query, KNOBS)
    n = check_count(n, DEFAULT_N)
    seed = check_seed(seed)
    split = canonical_split(split)
    if opts["score"] == "share" and opts["parts"] == 1:
        raise InputError(f"{spec}: score=share needs parts of 2 or more (one part is scored right or wrong)",
                         field="score")
    verifier = "math" if opts["parts"] == 1 else "math-parts-share" if opts["score"] == "share" else "math-parts"
    return generate(spec, _id_prefix(opts, seed), split, n, lambda rng: _problem(rng, opts), verifier=verifier,
                    field=FIELD)


def _id_prefix(opts: dict, seed: int) -> str:
    """The ids' prefix: every option that changes the problems, and the seed."""
    code = "".join(_OP_CODE[o] for o in opts["ops"])
    explain, parts = opts["explain"] == "yes", opts["parts"]
    return (f"arith-s{opts['steps']}-m{opts['max_value']}-{code}-{opts['style']}{'-explain' if explain else ''}"
            f"{f'-p{parts}' if parts > 1 else ''}{'-share' if opts['score'] == 'share' else ''}-seed{seed}")


def _problem(rng: random.Random, opts: dict) -> Optional[tuple[str, str, dict]]:
    """One draw of a problem (text, answer, meta): a single part, or the numbered list of
    ``parts`` parts; None when a part's draw was infeasible."""
    parts = opts["parts"]
    drawn = [_part(rng, opts) for _ in range(parts)]
    if any(d is None for d in drawn):
        return None
    if parts == 1:
        text, answer, meta = drawn[0]
    else:
        listed = " ".join(f"({k}) {d[0]}" for k, d in enumerate(drawn, start=1))
        text = f"{PARTS_TEXT.format(n=parts)} {listed}"
        answer = "; ".join(d[1] for d in drawn)
        meta = {"parts": [d[2] for d in drawn]}
    return text + (EXPLAIN_TEXT if opts["explain"] == "yes" else ""), answer, meta


def _part(rng: random.Random, opts: dict) -> Optional[tuple[str, str, dict]]:
    """One arithmetic problem (text in the option's style, answer, meta); None when the numbers
    drawn cannot stay within the options."""
    steps, max_value, ops, style = opts["steps"], opts["max_value"], opts["ops"], opts["style"]
    drawn = _draw_numbers(rng, steps, max_value, ops)
    if drawn is None:
        return None
    start, seq, operands, inter = drawn
    if style == "plain":
        text = _plain_text(start, seq, operands)
    elif style == "expr":
        text = _expr_text(start, seq, operands)
    else:
        text = _word_text(rng, start, seq, operands)
    meta = {
        "steps": steps,
        "style": style,
        "max_value": max_value,
        "start": start,
        "ops": seq,
        "operands": operands,
        "intermediates": inter,
        "solution": _solution(start, seq, operands, inter),
    }
    return text, str(inter[-1]), meta
