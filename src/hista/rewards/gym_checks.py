"""hista's own checks of a ``gym`` answer, on the host, before any reasoning-gym code sees it
(:mod:`hista.rewards.gym`).

Some of reasoning-gym's scorers evaluate the answer as Python (``eval`` in ``string_insertion``,
``spiral_matrix``, ``binary_matrix``, ``n_queens``; sympy's ``parse_expr``, an ``eval``, in
``countdown``, ``puzzle24``, ``polynomial_multiplication``, ``simple_integration`` and
``intermediate_integration``), and some pay answers that do not solve the problem. So an answer
first passes :func:`refusal`, which parses it with :mod:`ast` (a parser, nothing is run) and
accepts only what the task allows:

* ``eval`` tasks: a plain value (numbers, strings, lists and tuples of them, bare words), unless it
  is the gold answer itself (which the scorer compares without evaluating);
* ``parse_expr`` tasks: an expression of numbers and the task's variables with the operators the
  task allows (``+ - * /``, and ``**`` with a small constant exponent where the task is algebra),
  function calls only of the elementary functions in ``intermediate_integration``; never a name
  such as ``Integral``, ``integrate`` or ``expand`` that makes the scorer solve the problem;
* ``countdown`` and ``puzzle24``: integers and ``+ - * /`` only, each of the problem's numbers used
  exactly once (puzzle24's scorer checks neither);
* ``complex_arithmetic``: no ``nan`` or ``inf`` (a NaN distance is paid 1.0 upstream).

Tasks in :data:`RESCORED` are scored here instead of by their scorer: ``game_of_life_halting``
(upstream compares ``bool(answer)``, true for any text) and ``coin_flip`` (upstream pays a prefix
of the gold, so ``0`` for 0.375). Everything here is linear in the answer's length (at most
:data:`hista.rewards.gym.MAX_ANSWER_CHARS` characters).
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction
from typing import Callable, Optional

__all__ = ["RESCORED", "refusal"]

#: tasks whose scorer ``eval``s an answer that is not the gold answer
EVAL_TASKS = ("string_insertion", "spiral_matrix", "binary_matrix", "n_queens")
#: functions an ``intermediate_integration`` answer may call (sympy's names)
FUNCTIONS = ("exp", "log", "sqrt", "sin", "cos", "tan", "sec", "csc", "cot", "asin", "acos", "atan",
             "sinh", "cosh", "tanh")
#: the largest exponent an algebra answer may write
MAX_EXPONENT = 100
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_ALGEBRA = (*_ARITHMETIC, ast.Pow)


def _parsed(answer: str) -> Optional[ast.expr]:
    """``answer`` as Python parses it for ``eval`` (leading spaces and tabs dropped), or None."""
    try:
        return ast.parse(answer.lstrip(" \t"), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _plain_value(node: ast.AST) -> bool:
    """Whether ``node`` is a literal, list or tuple of them, a signed number or a bare word."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_plain_value(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float, complex))
    return isinstance(node, (ast.Constant, ast.Name))


def _literal_fraction(node: ast.AST) -> Optional[Fraction]:
    """The value of a constant number written with digits, ``-`` and ``/`` only, or None."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal_fraction(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        a, b = _literal_fraction(node.left), _literal_fraction(node.right)
        return None if a is None or b is None or b == 0 else a / b
    return None


def _expression_error(node: ast.AST, ops: tuple, names: frozenset, calls: frozenset, signed: bool
                      ) -> Optional[str]:
    """Why ``node`` is not an expression of numbers, ``names`` and calls of ``calls`` with the
    binary operators ``ops`` (and unary signs when ``signed``); None when it is. An exponent is a constant of at
    most :data:`MAX_EXPONENT`. Iterative: linear in the answer, whatever its nesting."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Constant):
            if type(node.value) not in (int, float):
                return f"{node.value!r} is not a number"
        elif isinstance(node, ast.Name):
            if node.id not in names:
                return f"the name {node.id!r} is not allowed here (allowed: {', '.join(sorted(names)) or 'none'})"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and signed:
            stack.append(node.operand)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ops):
            if isinstance(node.op, ast.Pow):
                exponent = _literal_fraction(node.right)
                if exponent is None or abs(exponent) > MAX_EXPONENT:
                    return f"an exponent must be a number of at most {MAX_EXPONENT}"
                stack.append(node.left)
            else:
                stack += [node.left, node.right]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in calls
              and len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred)):
            stack.append(node.args[0])
        else:
            return f"{type(node).__name__} is not allowed here"
    return None


def _expression(answer: str, ops: tuple, names=(), calls=(), signed: bool = True) -> Optional[str]:
    tree = _parsed(answer)
    if tree is None:
        return "not an expression hista can read"
    why = _expression_error(tree, ops, frozenset(names), frozenset(calls), signed)
    return None if why is None else f"not an expression the task allows: {why}"


def _literal(answer: str, entry: dict) -> Optional[str]:
    gold = entry.get("answer")
    if isinstance(gold, str) and answer.strip() == gold.strip():
        return None  # compared as text, never evaluated
    tree = _parsed(answer)
    if tree is not None and not _plain_value(tree):
        return "a Python expression, not a plain value (the task reads Python lists only as literals)"
    return None


def _numbers_used(answer: str, entry: dict) -> Optional[str]:
    why = _expression(answer, _ARITHMETIC, signed=False)
    if why is not None:
        return why
    used = [n.value for n in ast.walk(_parsed(answer)) if isinstance(n, ast.Constant)]
    if any(type(v) is not int for v in used):
        return "only whole numbers may be written"
    wanted = entry.get("metadata", {}).get("numbers")
    if isinstance(wanted, list) and Counter(used) != Counter(wanted):
        return f"the expression must use each of the numbers {wanted} exactly once"
    return None


def _algebra(answer: str, entry: dict, calls=()) -> Optional[str]:
    meta = entry.get("metadata", {})
    names = set(meta.get("variables") or [])
    if isinstance(meta.get("variable"), str):
        names |= {meta["variable"], "C"}
    if calls:
        names |= {"pi", "E"}
    return _expression(answer, _ALGEBRA, names, calls)


_NOT_FINITE = re.compile(r"nan|inf", re.IGNORECASE)

CHECKS: dict[str, Callable[[str, dict], Optional[str]]] = {
    **{task: _literal for task in EVAL_TASKS},
    "countdown": _numbers_used,
    "puzzle24": _numbers_used,
    "polynomial_multiplication": _algebra,
    "simple_integration": _algebra,
    "intermediate_integration": lambda answer, entry: _algebra(answer, entry, FUNCTIONS),
    "complex_arithmetic": lambda answer, entry: "not a finite number" if _NOT_FINITE.search(answer) else None,
}


def refusal(task: str, answer: str, entry: dict) -> Optional[str]:
    """Why ``answer`` to ``task``'s problem ``entry`` is not handed to the task's scorer (module
    docstring), or None when it may be."""
    check = CHECKS.get(task)
    return None if check is None else check(answer, entry)


# --------------------------------------------------------------------------- scored here

def _game_of_life_halting(answer: str, entry: dict) -> float:
    return float(answer.strip().lower() == str(entry.get("answer", "")).strip().lower())


_FRACTION = re.compile(r"\s*([+-]?\d{1,30}(?:\.\d{1,30})?)\s*(?:/\s*(\d{1,30})\s*)?")
_DECIMAL = re.compile(r"[+-]?(?:\d{1,100}(?:\.\d{0,100})?|\.\d{1,100})(?:[eE][+-]?\d{1,3})?")


def _decimal(text: str) -> Optional[Decimal]:
    """``text`` (commas as thousands separators allowed) as an exact decimal, or None: at most 100
    digits before and after the point and a three-digit exponent, so reading it is cheap."""
    text = text.strip().replace(",", "")
    return Decimal(text) if _DECIMAL.fullmatch(text) else None


def _coin_flip(answer: str, entry: dict) -> float:
    """1.0 when ``answer`` is the gold probability as a fraction, or as a decimal that is the gold
    rounded to its own number of places (half up or half to even) with at least three significant
    digits; upstream pays any prefix of the gold (``0`` for 0.375)."""
    gold_match = _FRACTION.fullmatch(str(entry.get("answer", "")))
    if gold_match is None or int(gold_match.group(2) or 1) == 0:
        return 0.0
    gold = Fraction(gold_match.group(1)) / int(gold_match.group(2) or 1)
    got = _FRACTION.fullmatch(answer)
    if got is not None and got.group(2) is not None:
        return float(int(got.group(2)) != 0 and Fraction(got.group(1)) / int(got.group(2)) == gold)
    value = _decimal(answer)
    if value is None or not value.is_finite():
        return 0.0
    if Fraction(value) == gold:
        return 1.0
    with localcontext(prec=500):
        exact = Decimal(gold.numerator) / Decimal(gold.denominator)
        rounded = {exact.quantize(value, rounding=mode) for mode in (ROUND_HALF_UP, ROUND_HALF_EVEN)}
    return float(value in rounded and len(value.as_tuple().digits) >= 3)


def _same_decimal(answer: str, entry: dict) -> float:
    """1.0 when ``answer`` is the gold's value exactly (``1.50`` for 1.5); upstream pays values
    within a tolerance (``decimal_arithmetic`` one unit in the last asked place, ``number_format``
    0.01), answers that are not the number asked for."""
    got, gold = _decimal(answer), _decimal(str(entry.get("answer", "")))
    return float(got is not None and gold is not None and got == gold)


def _sorted_numbers(answer: str, entry: dict) -> float:
    """1.0 when ``answer`` lists the gold's numbers, each exactly, in its order (a JSON or Python
    list of numbers or of strings of them); upstream pays numbers within a tolerance."""
    def numbers(text: str) -> Optional[list[Decimal]]:
        try:
            items = json.loads(text.replace("'", '"'))
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return None
        if not isinstance(items, list) or not all(isinstance(i, (str, int, float)) for i in items):
            return None
        values = [_decimal(str(i)) for i in items]
        return None if any(v is None for v in values) else values

    got, gold = numbers(answer), numbers(str(entry.get("answer", "")))
    return float(got is not None and got == gold)


def _pooled_matrix(answer: str, entry: dict) -> float:
    """1.0 when ``answer`` is a matrix of the gold's shape whose every element is correct to two
    decimal places, as the question asks (within half a unit of the second place of the gold, which
    is exact or rounded to two places); upstream pays 1% off."""
    def rows(text: str) -> Optional[list[list[Decimal]]]:
        out = [[_decimal(x) for x in line.split()] for line in text.strip().splitlines() if line.strip()]
        return None if any(v is None for row in out for v in row) else out

    got, gold = rows(answer), rows(str(entry.get("answer", "")))
    if got is None or gold is None or [len(r) for r in got] != [len(r) for r in gold]:
        return 0.0
    return float(all(abs(a - g) <= Decimal("0.005") for ra, rg in zip(got, gold) for a, g in zip(ra, rg)))


RESCORED: dict[str, Callable[[str, dict], float]] = {
    "game_of_life_halting": _game_of_life_halting,
    "coin_flip": _coin_flip,
    "decimal_arithmetic": _same_decimal,
    "number_format": _same_decimal,
    "number_sorting": _sorted_numbers,
    "pool_matrix": _pooled_matrix,
}
