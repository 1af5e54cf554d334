"""The math verifiers pay only for the answer (issue 62, SPEC §6): the wrong answers that the
adversarial pass on cb60262 found paid (F6: a relative tolerance of 1e-6 paid integers' neighbours
from 10^6 up, ``1e-13`` for 0, ``0.5\\%`` for 0.5; F7: a system's values in any order, a set for
an interval, ``a`` for ``A``) score 0.0, in the forms a model writes them; the right answers of
the same golds stay 1.0. The stalls of F3 and F10 (numbers that the answer only writes down) are
timed in tests/reliability/test_linear_time.py (``NUMBER_BOMBS``)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from hista import rewards
from hista.rewards.math import to_number


def test_an_exponent_is_read_up_to_three_digits():
    assert to_number("1e999") == 10**999 and to_number("-2.5E-999") == Fraction(-25, 10**1000)
    for text in ("1e1000", "1e999999999", "1E+9999999", "1e-999999999", "\\frac{1e9999999}{2}"):
        assert to_number(text) is None, text
    assert rewards.verify_with_reason("math", "\\boxed{1e999999999}", "5") == (
        0.0, "answer too complex to check: got 1e999999999")


@pytest.mark.parametrize("answer", [
    "9^{999999 \\cdot 999999}", "999999^{999999}", "(9^{9})^{999999}", "2^{999999 \\cdot 99}",
    "{9999!}!", "(10^{9})!", "9999!!", "(999 \\cdot 999)!", "\\binom{99999 \\cdot 9}{5000}",
    "{999999 \\choose 500000}", "1E+9999999", "10^{10^{10}}", "2^3^4"])
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
