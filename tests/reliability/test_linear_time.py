"""Host time linear in the completion (issue 41 item 2; SPEC §6, §4.2).

Every piece of host-side work on model output -- fence extraction and body assembly (code
verifiers), answer extraction (``math``: the last box, ``<answer>`` tags, the tail handed to
math-verify, the numeric fallback; ``choice``: the letter), Numca's number parser and macro
states -- must cost < 0.1 s of CPU time on a 64k-character adversarial completion.  A machine slower than
the one the budget was set on (a busy CI runner ran Numca's parser on ``1,1,1,…`` in 0.107 s
where an idle core takes 0.04 s) gets a second look instead of a failure: a case over the budget
passes when it costs at most ``GROWTH`` (6) times the same family at a quarter of the length --
linear work grows 4 times, quadratic work 16 times -- and any case over ``10 * LIMIT_S`` fails.  Each case
below is built to make a backtracking regex or a nested loop re-read the same span (runs of
whitespace, unclosed or nested ``\\boxed{``, brace runs, digit, ``.``, ``,``, ``-`` and ``/``
runs, ``<answer>`` without a close, ``(A)`` and ``**`` runs, Unicode digits, ...).

Times are ``time.process_time`` (CPU time of this process, so a busy 2-core CI machine does not
count other processes' work), the best of 3 runs; a run is stopped after ``GUARD_S`` seconds so
that a quadratic case fails instead of hanging the suite.  math-verify is third-party: its own
parsing may be superlinear, so the timing tests do not count the CPU time spent inside it, and
``test_math_verify_sees_a_bounded_window`` checks that it is only ever handed a bounded window.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cputime import CpuClock

pytestmark = pytest.mark.xdist_group("timing")  # the CPU-time tests take turns on one worker (tests/conftest.py)

N = 65536
LIMIT_S = 0.1
GUARD_S = 5.0
#: how much more a case over LIMIT_S may cost than its quarter-length version (linear: 4)
GROWTH = 6.0


def _fill(n: int, unit: str) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _numbers(n: int, fmt) -> str:
    return " ".join(fmt(i) for i in range(n))[:n]


def _then_blanks(n: int, words: str) -> str:
    """``words`` then a run of n/4 blanks, at the end of an ``n``-character text (inside any
    window a parser keeps of the completion's end, such as the choice verifier's last 20,000)."""
    blanks = n // 4
    return _fill(n - len(words) - blanks, "x. ") + words + " " * blanks


def _families(n: int) -> dict[str, str]:
    """The adversarial completions, each ``n`` characters."""
    return {
        "issue-41": ("\n" + " " * 16 + "\n" + " " * 15) * (n // 16),
        "spaces": " " * n,
        "newlines": "\n" * n,
        "crlf": _fill(n, "\r\n"),
        "tabs": _fill(n, " \t"),
        "indent-lines": _fill(n, "    \n"),
        "boxed-unclosed": _fill(n, "\\boxed{"),
        "boxed-nested": "\\boxed{" * (n // 14) + "}" * (n // 14),
        "boxed-nested-blank": "\\boxed{ " * (n // 16) + " }" * (n // 16),
        "boxed-token": _fill(n, "\\boxed "),
        "boxed-then-blanks": "\\boxed" + " " * n,
        "fbox-dollars": _fill(n, "\\fbox{$}"),
        "open-braces": "{" * n,
        "nested-braces": "{" * (n // 2) + "}" * (n // 2),
        "escaped-braces": _fill(n, "\\{"),
        "digits": "1" * n,
        "dots": _fill(n, "1."),
        "commas": _fill(n, "1,"),
        "thousands": "1" + _fill(n - 1, ",111"),
        "minus": "-" * n,
        "minus-digits": _fill(n, "-1"),
        "slashes": _fill(n, "1/"),
        "frac-unclosed": _fill(n, "\\frac{"),
        "frac-blanks": "\\frac" + " " * n,
        "frac-nested": _fill(n, "\\frac{1}{"),
        "fracs": _fill(n, "\\frac{1}{2} "),
        "distinct-integers": _numbers(n, str),
        "distinct-decimals": _numbers(n, lambda i: f"{i}.{i % 7 + 1}"),
        "distinct-fractions": _numbers(n, lambda i: f"{i}/{i + 1}"),
        "distinct-latex-fractions": _numbers(n, lambda i: f"\\frac{{{i}}}{{{i + 1}}}"),
        "long-decimal": "0." + "1" * (n - 2),
        "unicode-digits": "٣" * n,
        "answer-unclosed": _fill(n, "<answer>"),
        "answer-open-blanks": "<answer>" + " " * n,
        "answer-closes": _fill(n, "</answer>"),
        "answer-blanks": _then_blanks(n, "answer"),
        "answer-is-blanks": _then_blanks(n, "the answer is")[:-1] + ".",
        "answer-colon-blanks": _then_blanks(n, "Answer:") + "**",
        "answer-words": _fill(n, "answer "),
        "final-answer": _fill(n, "final answer is "),
        "option-blanks": _then_blanks(n, "option"),
        "choose-blanks": _then_blanks(n, "I choose") + "$",
        "option-words": _fill(n, "option "),
        "paren-letters": _fill(n, "(A) "),
        "letter-parens": _fill(n, "A) "),
        "stars": "*" * n,
        "bold-blanks": _fill(n, "** "),
        "bold-then-blanks": _then_blanks(n, "**"),
        "letter-line": " " * (n // 2) + "A" + " " * (n // 2) + "x",
        "dollars": "$" * n,
        "text-unclosed": _fill(n, "\\text{"),
        "text-blanks": "\\text" + " " * n,
        "assignments": _fill(n, "x = "),
        "unit-words": "5" + _fill(n - 1, " ab"),
        "carets": "^" * n,
        "parens": "(" * n,
        "plus-chain": _fill(n, "1+"),
        "backticks": "`" * n,
        "fences": _fill(n, "```\n"),
        "python-fences": _fill(n, "```python\n"),
        "fence-blank-lines": "```python\n" + _fill(n - 14, " \n") + "\n```",
        "fence-indented": "```python\n" + _fill(n - 14, "    x = 1\n") + "```",
        "blanks-then-def": _fill(n - 6, "\n" + " " * 16 + "\n" + " " * 15) + "def f(",
        "defs": _fill(n, "def f(\n"),
        "async-blanks": _fill(n, "async   \n"),
        "mixed": _fill(n, "The answer is \\boxed{1.1,000/2} (A) **B** option C <answer>-3</answer> {{ ```py\n"),
    }


#: adversarial completions of N (64k) characters, and the same families at a quarter of that
FAMILIES, QUARTERS = _families(N), _families(N // 4)


def _assert_linear(fn, cases=None, quarters=None):
    """``fn`` on every adversarial completion (``cases``: name -> argument, by default
    ``FAMILIES``) costs less than ``LIMIT_S`` of CPU time, or, on a slower machine, less than
    ``10 * LIMIT_S`` and at most ``GROWTH`` times its quarter-length version (``quarters``: name
    -> argument, by default ``QUARTERS``).  ``fn`` is run once on a short text first, so that
    imports and first-call set-up are not timed."""
    cases, quarters = (FAMILIES, QUARTERS) if cases is None else (cases, quarters)
    fn(FAMILIES["mixed"][:300] if cases is FAMILIES else next(iter(cases.values())))
    slow = {name: why for name, arg in cases.items()
            if (why := CLOCK.over_budget(fn, arg, quarters[name], limit=LIMIT_S, guard_s=GUARD_S, growth=GROWTH))}
    assert not slow, f"over {LIMIT_S} s of CPU time, and not linear, on {len(slow)} 64k-character inputs: {slow}"


def test_quadratic_work_fails_the_check():
    """The check's second look lets linear work through on a slow machine, not quadratic work:
    re-reading the rest of the text at every third character (about 0.4 s on 64k characters on an
    idle core, 16 times its quarter-length version) fails, whether it lands under or over
    ``10 * LIMIT_S``."""
    def quadratic(text):
        return sum(text[i:].count(" ") for i in range(0, len(text), 3))

    with pytest.raises(AssertionError, match="not linear"):
        _assert_linear(quadratic, {"spaces": FAMILIES["spaces"]}, {"spaces": QUARTERS["spaces"]})


# --------------------------------------------------------------------------- math, choice


#: the timing tests' clock; the wrappers below add the excluded third-party time to it
CLOCK = CpuClock()


@pytest.fixture
def math_verify_excluded(monkeypatch):
    """The real math-verify, its ``parse`` and ``verify`` timed apart: their CPU time is not
    counted as hista's (they only ever see a bounded window, as
    ``test_math_verify_sees_a_bounded_window`` checks); returns the lengths they were handed."""
    import math_verify

    lengths = []

    def timed(real):
        def call(first, *args, **kw):
            if isinstance(first, str):
                lengths.append(len(first))
            start = time.process_time()
            try:
                return real(first, *args, **kw)
            finally:
                CLOCK.excluded += time.process_time() - start
        return call

    monkeypatch.setattr(math_verify, "parse", timed(math_verify.parse))
    monkeypatch.setattr(math_verify, "verify", timed(math_verify.verify))
    return lengths


def _window_bound():
    from hista.rewards.math import FALLBACK_TAIL_CHARS, MAX_EXPR_CHARS

    return max(FALLBACK_TAIL_CHARS, MAX_EXPR_CHARS + len("\\boxed{}"))


def test_last_boxed_is_linear():
    from hista.rewards.math import last_boxed

    _assert_linear(last_boxed)


def test_math_extraction_is_linear(math_verify_excluded):
    from hista.rewards.math import extract_math_answer

    _assert_linear(extract_math_answer)
    assert max(math_verify_excluded) <= _window_bound()


def test_math_verifier_is_linear(math_verify_excluded):
    from hista.rewards.math import verify_math

    _assert_linear(lambda text: verify_math(text, "42"))
    # a box content goes to the numeric fallback and math-verify too
    _assert_linear(lambda text: verify_math("so \\boxed{" + text[:900] + "}", "42"))
    _assert_linear(lambda text: verify_math(text + " so the answer is \\boxed{" + text[:900] + "}", "42"))
    assert max(math_verify_excluded) <= _window_bound()


def test_math_parts_verifier_is_linear(math_verify_excluded):
    from hista.rewards.math import last_outer_boxed, numbered_items, verify_math_parts

    _assert_linear(lambda text: last_outer_boxed(text, 3))
    _assert_linear(lambda text: numbered_items(text, 3))
    _assert_linear(lambda text: numbered_items("1. 6\n2. 15\n3. 5" + text, 3))  # the last item runs to its list end
    _assert_linear(lambda text: verify_math_parts("1. " + text + "\n2. 15\n3. 5", "6; 15; 5"))
    _assert_linear(lambda text: verify_math_parts(text, "6; 15; 5"))
    _assert_linear(lambda text: verify_math_parts(text + " \\boxed{6} \\boxed{" + text[:900] + "} \\boxed{5}",
                                                  "6; 15; 5"))
    assert max(math_verify_excluded, default=0) <= _window_bound()


@pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None,
                    reason="the gym extra (pip install 'hista[gym]') brings reasoning-gym")
def test_gym_verifier_is_linear(math_verify_excluded):
    """The gym verifier's own work: the box, the tag and the math fallback's bounded tail; the
    task's scorer runs in its worker process (not this one's CPU time) on at most
    MAX_ANSWER_CHARS characters, within its time bound."""
    from hista import tasks
    from hista.rewards.gym import verify_gym

    answer = tasks.load("gym:chain_sum?min_terms=2&max_terms=2", n=1)[0]["answer"]
    _assert_linear(lambda text: verify_gym(text, answer))
    _assert_linear(lambda text: verify_gym("\\boxed{" + text[:900] + "} " + text, answer))
    _assert_linear(lambda text: verify_gym(text + "<answer>" + text[:900] + "</answer>", answer))
    assert max(math_verify_excluded, default=0) <= _window_bound()


def test_math_verify_sees_a_bounded_window(monkeypatch):
    """The real math-verify, wrapped: whatever the completion's length, it is handed at most
    the last ~2,000 characters (or a box content capped at MAX_EXPR_CHARS)."""
    import math_verify

    from hista.rewards.math import verify_math

    lengths = []
    real = math_verify.parse

    def parse(text, *args, **kw):
        lengths.append(len(text))
        return real(text, *args, **kw)

    monkeypatch.setattr(math_verify, "parse", parse)
    for name in ("issue-41", "answer-unclosed", "distinct-integers", "mixed", "dollars"):
        verify_math(FAMILIES[name], "42")
        verify_math(FAMILIES[name] + " \\boxed{" + FAMILIES[name][:5000] + "}", "42")
    assert lengths and max(lengths) <= _window_bound()


#: short answers whose numbers are huge (issue 62): the numeric reading computed 10**exponent
#: exactly (``1e999999999``: hours), and sympy evaluates powers, factorials, Γ, gcd and binomials
#: exactly, with no timeout outside the main thread (``9^{999999 \cdot 999999}``: > 200 s in a
#: worker thread), math-verify's parser some of them even before its answer is checked
NUMBER_BOMBS = [
    "1e999999999", "1E+9999999", "1e-999999999", "\\frac{1e9999999}{2}", "-1e9999999\\%",
    "9^{999999 \\cdot 999999}", "999999^{999999}", "(9^{9})^{999999}", "2^{999999 \\cdot 99}",
    "9^{99 \\cdot 99 \\cdot 99 \\cdot 99}", "((9^{99})^{99})^{99}", "10^{10^{10}}", "2^3^4^5",
    "{9999!}!", "(10^{9})!", "9999!!", "(999 \\cdot 999)!", "\\binom{99999 \\cdot 9}{5000}",
    "{999999 \\choose 500000}", "9^{99999} + 9^{99999}", "\\Gamma(999999)", "\\gcd(10^{999999}, 6)",
    "\\operatorname{lcm}(10^{99999}, 7)",
]

#: where a verifier reads a bomb (``{}``; ``FILLER`` is 64k characters), against which gold
BOMB_PLACES = [
    ("math", "\\boxed{{{}}}", "5"),
    ("math", "\\boxed{{{}}}", "\\sqrt{2}"),
    ("math", "FILLER \\boxed{{{}}}", "\\sqrt{2}"),
    ("math", "<answer>{}</answer>", "\\sqrt{2}"),
    ("math", "so the answer is ${}$", "\\sqrt{2}"),
    ("math-boxed", "\\boxed{{{}}}", "239"),
    ("math-parts", "\\boxed{{{}}} \\boxed{{5}}", "3; 5"),
    ("math-parts", "1. {}\n2. 5", "x^2; 5"),
]

#: the child of test_number_readings_are_bounded: every bomb in every place, in the main thread
#: and in a worker thread; one JSON line per call: its CPU time (math-verify's included) and score.
#: Each call starts after a garbage collection and runs with the collector off: a pause to collect
#: the garbage of earlier calls (up to 0.05 s once sympy's objects pile up) is not the call's work
_BOMB_CHILD = """
import gc, json, resource, sys, threading, time
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a regression fails, it does not swap
from hista.rewards import verify_with_reason
bombs, places = json.loads(sys.argv[1]), json.loads(sys.argv[2])
filler = " ".join(str(i) for i in range(65536))[:65536]
verify_with_reason("math", "so it is $x+1$", "\\\\sqrt{3}")  # imports and first-call set-up

def call(verifier, completion, gold, out):
    gc.collect()  # the garbage of earlier calls is collected before the clock starts, not during this call
    gc.disable()
    try:
        start = time.process_time()
        out["score"] = verify_with_reason(verifier, completion, gold)[0]
        out["cpu"] = time.process_time() - start
    finally:
        gc.enable()

for bomb in bombs:
    for verifier, place, gold in places:
        completion = place.replace("FILLER", filler).format(bomb)
        for thread in (False, True):
            out = dict(bomb=bomb, verifier=verifier, place=place, gold=gold, thread=thread)
            if thread:
                worker = threading.Thread(target=call, args=(verifier, completion, gold, out))
                worker.start()
                worker.join()
            else:
                call(verifier, completion, gold, out)
            print(json.dumps(out), flush=True)
"""


def test_number_readings_are_bounded():
    """A number the answer only writes down (``1e999999999``, ``9^{999999 \\cdot 999999}``,
    ``{9999!}!``) is never computed: each of NUMBER_BOMBS, wherever a verifier reads it, scores 0
    within LIMIT_S of CPU time, math-verify's included, in the main thread and in a worker thread
    (where no timeout applies). Run in a child process, killed after 120 s: a computation of
    10**999999999 cannot be interrupted from Python (nor a thread's ``join``)."""
    import hista

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(hista.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, "-c", _BOMB_CHILD, json.dumps(NUMBER_BOMBS), json.dumps(BOMB_PLACES)],
                              capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired as exc:
        calls = (exc.stdout or b"").decode().splitlines()
        pytest.fail(f"stalled after {len(calls)} calls; the last one done: {calls[-1] if calls else None}")
    assert done.returncode == 0, done.stderr[-2000:]
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(calls) == len(NUMBER_BOMBS) * len(BOMB_PLACES) * 2
    slow = [call for call in calls if call["cpu"] >= LIMIT_S]
    assert not slow, f"over {LIMIT_S} s of CPU time on {len(slow)} calls: {slow[:5]}"
    paid = [call for call in calls if call["score"] != 0.0]
    assert not paid, paid[:5]


def test_choice_extraction_is_linear():
    from hista.rewards.choice import extract_choice, verify_choice

    _assert_linear(extract_choice)
    _assert_linear(lambda text: verify_choice(text, "B"))
    _assert_linear(lambda text: extract_choice(text, "ABCDEFGHIJKLMNOP"))
    _assert_linear(lambda text: verify_choice("\\boxed{" + text + "}", "B"))  # a 64k box content


# --------------------------------------------------------------------------- Numca


@pytest.mark.parametrize("parser", ["default", "digits"])
def test_numca_parser_is_linear(parser):
    from hista.estimators.milestones import parse_numbers

    _assert_linear(lambda text: parse_numbers(text, parser))


def _parse(text: str) -> tuple[list[str], list[int], list[tuple[int, int]]]:
    """A completion's number keys, their character positions and token offsets (4 characters
    a token)."""
    from hista.estimators.milestones import parse_numbers

    numbers = parse_numbers(text)
    return [n.key for n in numbers], [n.start for n in numbers], [(i, i + 4) for i in range(0, len(text), 4)]


@pytest.fixture(scope="module")
def parsed():
    """Each family's parse, at full and at a quarter length."""
    return tuple({name: _parse(text) for name, text in texts.items()} for texts in (FAMILIES, QUARTERS))


def test_numca_milestone_positions_are_linear(parsed):
    from hista.estimators.milestones import token_positions

    _assert_linear(lambda numbers: token_positions(numbers[1], numbers[2]), *parsed)


def _macro_states(keys: list[str], positions: list[int]) -> None:
    """Numca's work on one completion's numbers: the merged path, the value table (the
    completion's chain of states) and a look-up of each state on the path."""
    from hista.estimators.milestones import ValueTable, chain_states, path_states

    table = ValueTable()
    table.add(keys, 1.0)
    for _, state in path_states(keys, positions, 1):
        table.get(state)
    chain_states(keys).index(chain_states(keys[:1])[-1])


def test_numca_macro_states_are_linear(parsed):
    from hista.estimators.milestones import token_positions

    states = [{name: (keys, token_positions(chars, offsets)) for name, (keys, chars, offsets) in p.items()}
              for p in parsed]
    _assert_linear(lambda numbers: _macro_states(*numbers), *states)


def test_numca_long_numbers_parse():
    """Numbers of any length parse (an integer keeps its exact key; a decimal or fraction past
    MAX_EXACT_DIGITS significant digits keeps its digits as written)."""
    from hista.estimators.milestones import MAX_EXACT_DIGITS, parse_numbers

    keys = [n.key for n in parse_numbers("0" + "7" * 5000 + " -" + "1" * 5000 + ".50 x 1.5" + "0" * 5000)]
    assert keys == ["7" * 5000, "-" + "1" * 5000 + ".5", "3/2"]
    big = "1" * (MAX_EXACT_DIGITS + 1)
    assert [n.key for n in parse_numbers(f"0.{big}0 -{big}/{big}0 2/0.0")] == [
        "0." + big, "-" + big + "/" + big + "0", "2", "0"]
    assert [n.key for n in parse_numbers("0." + "1" * (MAX_EXACT_DIGITS - 1))][0].count("/") == 1


def test_numca_macro_states_are_sets():
    """Macro states are sets: the same numbers reached in another order are one state, looked
    up alike by its id (StateId) or as a frozenset."""
    from hista.estimators.milestones import EMPTY, ValueTable, chain_states, macro_path, state_chain

    table = ValueTable()
    table.add(["1", "2", "3", "2"], 1.0)
    table.add(["3", "2", "1"], 0.0)
    assert len(table) == 6  # ∅, {1}, {3}, {1,2}, {2,3}, {1,2,3}
    assert table.get(frozenset({"1", "2", "3"})) == 0.5
    assert table.get(chain_states(["3", "2", "1"])[-1]) == table.get(chain_states(["2", "1", "3"])[-1]) == 0.5
    assert table.get(EMPTY) == table.get(frozenset()) == 0.5
    assert table.get(frozenset({"9"})) is None
    assert table.stats[frozenset({"1", "2"})] == [1.0, 1.0]
    assert state_chain(["1", "2", "1"]) == [frozenset(), frozenset({"1"}), frozenset({"1", "2"})]
    assert macro_path(["1", "2"], [3, 9], 1) == [(3, frozenset({"1"})), (9, frozenset({"1", "2"}))]


# --------------------------------------------------------------------------- code verifiers

PROMPT = 'def f(x):\n    """Return x."""\n'


def test_extract_code_is_linear():
    from hista.rewards.code import extract_code

    _assert_linear(extract_code)


def test_assemble_function_is_linear():
    from hista.rewards.code import assemble_function

    _assert_linear(lambda text: assemble_function(text, PROMPT, "f"))
    _assert_linear(lambda text: assemble_function("```python\n" + text + "\n```", PROMPT, "f"))


def test_parse_cases_is_linear():
    from hista.rewards.code import parse_cases

    _assert_linear(lambda text: parse_cases(json.dumps([{"input": text, "output": text}])))


def test_outputs_match_is_linear():
    from hista.rewards.code import outputs_match

    _assert_linear(lambda text: outputs_match(text, text + "\nx"))


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_reasons_about_a_program_are_linear(stream):
    """The code verifier's host side on a program that prints an adversarial text (up to the
    output cap) to stdout (a wrong-output reason) or to stderr before failing (a runtime-error
    reason): the sandbox's own processes are not this process's CPU time."""
    from hista.rewards.code import verify_code

    exit_ = "\nraise SystemExit(1)" if stream == "stderr" else ""
    names = ("issue-41", "spaces", "newlines", "crlf", "mixed", "indent-lines")
    cases, quarters = ({name: texts[name] for name in names} for texts in (FAMILIES, QUARTERS))

    def score(text):
        program = f"import sys\nsys.{stream}.write({text[:60000]!r}){exit_}"
        reward, reason = verify_code(f"```python\n{program}\n```", json.dumps([{"input": "", "output": "x"}]))
        assert reward == 0.0 and len(reason) < 300

    _assert_linear(score, cases, quarters)
