"""The math verifiers pay only for the answer (issue 62, SPEC §6): the wrong answers that the
adversarial pass on cb60262 found paid (F6: a relative tolerance of 1e-6 paid integers' neighbours
from 10^6 up, ``1e-13`` for 0, ``0.5\\%`` for 0.5; F7: a system's values in any order, a set for
an interval, ``a`` for ``A``) score 0.0, in the forms a model writes them; the right answers of
the same golds stay 1.0. The stalls of F3 and F10 (numbers that the answer only writes down) are
timed in tests/reliability/test_linear_time.py (``NUMBER_BOMBS``)."""

from __future__ import annotations

import importlib.util
from fractions import Fraction

import pytest

from hista import rewards, tasks
from hista.rewards.math import to_number

champ_only = pytest.mark.skipif(importlib.util.find_spec("champ_dataset") is None,
                                reason="the gym extra (pip install 'hista[gym]') brings champ-dataset")

#: (verifier, answer in a box, gold): paid 1.0 on cb60262, must score 0.0
WRONG = [
    # F6: an integer gold asks for that integer
    ("math", "1000001", "1000000"),
    ("math", "1048577", "1048576"),
    ("math", "123456900", "123456789"),
    ("math", "2000001999", "2000000000"),
    ("math", "999999.9999999", "1000000"),
    ("math-boxed", "2001001", "2001000"),  # CHAMP's P_Combinatorics_30
    ("math-boxed", "2001002", "2001000"),
    ("math-boxed", "2000998", "2001000"),
    ("math", "0.0000000000001", "0"),
    ("math", "1e-13", "0"),
    ("math", "-1e-13", "0"),
    # F6: a percent sign is dropped only for a whole-number gold
    ("math", "0.5\\%", "0.5"),
    ("math", "0.5\\%", "\\frac{1}{2}"),
    ("math", "12.5%", "12.5"),
    # a decimal for an exact fraction that has a finite decimal expansion is not a rounding of it
    ("math", "0.25001", "\\frac{1}{4}"),
    ("math", "0.3", "\\frac{1}{3}"),
    ("math", "0.33333", "\\frac{1}{3}"),  # fewer than 6 significant digits
    ("math", "0.333334", "\\frac{1}{3}"),  # neither rounded nor truncated
    ("math", "\\frac{2}{7}", "0.3"),  # a gold with fewer than 3 significant digits is exact
    # F7: CHAMP's systems, the values unnamed in another order (P_Number-Theory_4, _31,
    # P_Polynomial_13, _21), a set, a tuple named in another order, a name twice, a value short
    ("math-boxed", "(5, 6)", "x=6, y=5"),
    ("math-boxed", "5, 6", "x=6, y=5"),
    ("math-boxed", "\\{5, 6\\}", "x=6, y=5"),
    ("math-boxed", "\\{6, 5\\}", "x=6, y=5"),
    ("math-boxed", "(x, y) = (5, 6)", "x=6, y=5"),
    ("math-boxed", "x=5, y=6", "x=6, y=5"),
    ("math-boxed", "x=6, y=5, x=6", "x=6, y=5"),
    ("math-boxed", "x=6", "x=6, y=5"),
    ("math-boxed", "6", "x=6, y=5"),
    ("math-boxed", "1, 2", "x=2, y=1"),
    ("math-boxed", "(1, 2)", "x=2, y=1"),
    ("math", "\\{1, 2\\}", "x=2, y=1"),
    ("math-boxed", "(-4, 3)", "a=3, b=-4"),
    ("math-boxed", "-4, 3", "a=3, b=-4"),
    ("math-boxed", "(4, -7, 3)", "a=3, b=-7, c=4"),
    ("math-boxed", "(3, 4, -7)", "a=3, b=-7, c=4"),
    ("math-boxed", "\\{3, -7, 4\\}", "a=3, b=-7, c=4"),
    ("math-boxed", "a=4, b=-7, c=3", "a=3, b=-7, c=4"),
    ("math-boxed", "0", "x=y=0"),
    # F7: a set is not an interval or a tuple, nor the other way round
    ("math", "\\{1, 2\\}", "(1, 2)"),
    ("math", "\\{-\\infty, 2\\}", "(-\\infty, 2)"),
    ("math", "\\left\\{ 1, 2 \\right\\}", "(1, 2)"),
    ("math", "(1, 2)", "\\{1, 2\\}"),
    ("math", "[1, 2]", "\\{1, 2\\}"),
    # F7: a letter in the other case
    ("math", "a", "A"),
    ("math", "2A", "2a"),
    ("math", "\\pi R^2", "\\pi r^2"),
]

#: (verifier, answer in a box, gold): right answers that stay 1.0
RIGHT = [
    ("math", "1000000", "1000000"),
    ("math", "1000000.0", "1000000"),
    ("math", "1,000,000", "1000000"),
    ("math-boxed", "2001000", "2001000"),
    ("math", "0", "0"),
    ("math", "0.0", "0"),
    ("math", "50\\%", "50"),
    ("math", "25", "25\\%"),
    ("math", "0.5\\%", "0.5\\%"),
    ("math", "1e-3", "0.001"),
    ("math", "\\frac{1}{2}", "0.5"),
    ("math", "0.3333333333", "\\frac{1}{3}"),
    ("math", "0.333333", "\\frac{1}{3}"),  # truncated
    ("math", "0.666667", "2/3"),  # rounded
    ("math", "0.666666", "2/3"),  # truncated
    ("math", "-0.142857", "-\\frac{1}{7}"),
    ("math", "\\frac{1}{3}", "0.333"),  # a gold that rounds
    ("math", "\\frac{22}{7}", "3.14"),
    # a system: by name in any order, or its values in the gold's order
    ("math-boxed", "x=6, y=5", "x=6, y=5"),
    ("math-boxed", "y=5, x=6", "x=6, y=5"),
    ("math-boxed", "x = 6,\\; y = 5", "x=6, y=5"),
    ("math-boxed", "x = 6 \\text{ and } y = 5", "x=6, y=5"),
    ("math-boxed", "(x, y) = (6, 5)", "x=6, y=5"),
    ("math-boxed", "(6, 5)", "x=6, y=5"),
    ("math-boxed", "\\left(6, 5\\right)", "x=6, y=5"),
    ("math-boxed", "6, 5", "x=6, y=5"),
    ("math-boxed", "x=\\frac{12}{2}, y=5.0", "x=6, y=5"),
    ("math-boxed", "(3, -7, 4)", "a=3, b=-7, c=4"),
    ("math-boxed", "c=4, a=3, b=-7", "a=3, b=-7, c=4"),
    ("math-boxed", "x=y=0", "x=y=0"),
    ("math-boxed", "x=0, y=0", "x=y=0"),
    ("math-boxed", "(0, 0)", "x=y=0"),
    # answers that are not systems are left to math-verify as before
    ("math-boxed", "(8, 2), (2, 8)", "(x=8, y=2), (x=2, y=8)"),
    ("math-boxed", "(2, 8), (8, 2)", "(x=8, y=2), (x=2, y=8)"),
    ("math-boxed", "1, -1", "x=±1"),
    ("math-boxed", "\\pm 1", "x=±1"),
    ("math-boxed", "f(x)=0", "f(x)=0"),
    ("math", "1, 2", "\\{1, 2\\}"),
    ("math", "2, 1", "\\{1, 2\\}"),
    ("math", "\\{2, 1\\}", "\\{1, 2\\}"),
    ("math", "(1, 2)", "(1,2)"),
    ("math", "[-1, 1]", "[-1, 1]"),
    ("math", "A", "A"),
    ("math", "2\\sqrt{2}", "\\sqrt{8}"),
    ("math", "\\text{Evelyn}", "\\text{Evelyn}"),
    # the factorial guard no longer refuses a factorial of a group (F7's false negatives)
    ("math", "n \\cdot (n-1)!", "n!"),
    ("math", "(n-1)!/2", "n!/(2n)"),
    ("math", "\\frac{(2n)!}{2^n n!}", "(2n)!/(2^n*n!)"),
    ("math", "2^{997}", "2^997"),
    ("math", "\\binom{n+1}{2m+1}", "\\binom{n+1}{2m+1}"),
]


@pytest.mark.parametrize("verifier, answer, gold", WRONG)
def test_wrong_answers_are_not_paid(verifier, answer, gold):
    score, reason = rewards.verify_with_reason(verifier, "\\boxed{%s}" % answer, gold)
    assert score == 0.0, reason


@pytest.mark.parametrize("verifier, answer, gold", RIGHT)
def test_right_answers_stay_paid(verifier, answer, gold):
    assert rewards.verify_with_reason(verifier, "\\boxed{%s}" % answer, gold) == (1.0, "correct")


def test_an_exponent_is_read_up_to_three_digits():
    assert to_number("1e999") == 10**999 and to_number("-2.5E-999") == Fraction(-25, 10**1000)
    for text in ("1e1000", "1e999999999", "1E+9999999", "1e-999999999", "\\frac{1e9999999}{2}"):
        assert to_number(text) is None, text
    assert rewards.verify_with_reason("math", "\\boxed{1e999999999}", "5") == (
        0.0, "answer too complex to check: got 1e999999999")


@pytest.mark.parametrize("answer", [
    "9^{999999 \\cdot 999999}", "999999^{999999}", "(9^{9})^{999999}", "2^{999999 \\cdot 99}",
    "{9999!}!", "(10^{9})!", "9999!!", "(999 \\cdot 999)!", "\\binom{99999 \\cdot 9}{5000}",
    "{999999 \\choose 500000}", "1E+9999999", "10^{10^{10}}", "2^3^4", "\\Gamma(999999)"])
def test_numbers_too_large_to_compute_are_refused(answer):
    """F10: the guard estimates the digits of powers, factorials and binomials (products of short
    numbers included), so sympy is never handed them."""
    score, reason = rewards.verify_with_reason("math", "\\boxed{%s}" % answer, "\\sqrt{2}")
    assert score == 0.0 and reason.startswith("answer too complex to check"), reason


@pytest.mark.parametrize("answer", ["2^{2017}", "2^{99999}", "9^{9999}", "(x^2+1)^2", "(n-1)!", "9999!",
                                    "\\binom{9999}{5000}", "{n+1 \\choose 2m+1}", "(2n)!/(2^n n!)", "1.5E-99"])
def test_numbers_of_a_reasonable_size_are_checked(answer):
    score, reason = rewards.verify_with_reason("math", "\\boxed{%s}" % answer, "\\sqrt{2}")
    assert (score, reason) == (0.0, f"wrong answer: got {answer}")


#: (CHAMP id, wrong answer) that cb60262 paid 1.0 under math-boxed (F6, F7)
CHAMP_PAID = [("P_Combinatorics_30", "2001001"), ("P_Combinatorics_30", "2001002"),
              ("P_Combinatorics_30", "2000998"), ("P_Number-Theory_4", "(5, 6)"),
              ("P_Number-Theory_4", "\\{5, 6\\}"), ("P_Number-Theory_4", "(x, y) = (5, 6)"),
              ("P_Number-Theory_31", "1, 2"), ("P_Number-Theory_31", "(1, 2)"),
              ("P_Polynomial_13", "(-4, 3)"), ("P_Polynomial_13", "-4, 3"),
              ("P_Polynomial_21", "(4, -7, 3)"), ("P_Polynomial_21", "(3, 4, -7)")]


@champ_only
def test_champ_pays_none_of_the_wrong_answers_found():
    from hista.tasks.champ import wrong_answers

    gold = {r["id"]: r["answer"] for r in tasks.load("champ:all")}
    for pid, wrong in CHAMP_PAID:
        assert rewards.verify("math-boxed", "\\boxed{%s}" % wrong, gold[pid]) == 0.0, (pid, wrong)
    # the load-time probes hold the verifier to it: each gold's neighbour and reversed system
    assert wrong_answers("2001000") == ["123456789", "2001001"]
    assert wrong_answers("a=3, b=-7, c=4") == ["123456789", "(4, -7, 3)"]
    assert wrong_answers("x=y=0") == ["123456789"]
    for answer in gold.values():
        for wrong in wrong_answers(answer):
            assert rewards.verify("math-boxed", "\\boxed{%s}" % wrong, answer) == 0.0, (answer, wrong)


@pytest.mark.parametrize("completion", [
    "**Step 1:** add **40** and **2**. The answer is 42", "**Final answer:** 42", "Yes!! The answer is 42",
    "So **x = 6** and **y = 7**; the answer is 42", "Wow! 5! is 120. The answer is 42", "^_^ the answer is 42",
    "We earned 250000! The answer is 42", "Wow 100000!! The answer is 42", "2^{1000000} is huge; the answer is 42",
    "So the answer is 42!"])
def test_prose_is_no_number_to_compute(completion):
    """The guard on the fallback's text reads Markdown's ``**bold**`` as no power and ``!!`` after
    a word as no factorial, and it holds back only texts with what math-verify's parser computes
    itself (binomials, Γ, gcd, lcm, ``1E+k``), so these completions are still read."""
    assert rewards.verify_with_reason("math", completion, "42") == (1.0, "correct")
