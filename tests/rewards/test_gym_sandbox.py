"""The ``gym`` verifier's trust boundary (issue 62, items 1, 2 and 4; the reproducers of
shared/reviews/adversarial-cb60262.md F1, F2, F4, F5, F9, F13, F16, F17): no answer runs as code
on the host, what a scorer runs stays in its sandbox and its call, and the answers that bought a
reward without solving score 0."""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from hista import rewards, tasks
from hista.errors import InputError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None,
                                reason="the gym extra (pip install 'hista[gym]') brings reasoning-gym")

#: the scorers that evaluate an answer: eval (4), sympy's parse_expr (5)
EVALUATING = ("string_insertion", "spiral_matrix", "binary_matrix", "n_queens", "countdown", "puzzle24",
              "polynomial_multiplication", "simple_integration", "intermediate_integration")
#: F2: a completion that replaced json.dumps in the old long-lived worker, paying itself and every later call
POISON = ("exec(\"import json\\nd=json.dumps\\njson.dumps=lambda o,*a,**k: d({'score': 1.0}) "
          "if isinstance(o, dict) and ('score' in o or 'error' in o) else d(o,*a,**k)\", {})")


def _record(task: str, split: str = "test") -> dict:
    return tasks.load(f"gym:{task}", n=1, seed=0, split=split)[0]


def _entry(record: dict) -> dict:
    return json.loads(record["answer"])["entry"]


def _boxed(answer: str) -> str:
    return "\\boxed{%s}" % answer


@pytest.mark.parametrize("task", EVALUATING)
def test_no_answer_is_evaluated_on_the_host(task, tmp_path, monkeypatch):
    """F1: the answer never reaches eval, exec or parse_expr in this process; the payload that ran on
    all nine is refused, creates nothing, and the gold is still paid (scored in the sandbox)."""
    import sympy.parsing.sympy_parser as sympy_parser

    record = _record(task)
    rewards.verify("gym", "", record["answer"])  # every module imported (imports run module code through exec)

    def evaluated(*args, **kwargs):
        raise AssertionError(f"an answer was evaluated on the host: {args[:1]!r}")

    for target, name in ((builtins, "eval"), (builtins, "exec"), (sympy_parser, "parse_expr")):
        monkeypatch.setattr(target, name, evaluated)
    marker = tmp_path / f"pwned-{task}"
    for wrap in (_boxed, lambda a: f"<answer>{a}</answer>"):
        reward, reason = rewards.verify_with_reason("gym", wrap(f"__import__('os').system('touch {marker}')"),
                                                   record["answer"])
        assert reward == 0.0 and reason.startswith("answer refused:"), reason
    assert not marker.exists()
    assert rewards.verify_with_reason("gym", _boxed(record["meta"]["gold"]), record["answer"]) == (1.0, "correct")


def test_what_a_scorer_runs_stays_in_its_sandbox(tmp_path, monkeypatch):
    """F1's consequences, with hista's check bypassed (the answer handed to the scorer directly, as
    an unknown evaluating scorer would take it): no host file is written, the host's environment is
    not there, the site-packages are read-only, no process survives the call."""
    from hista.rewards import gym

    entry = _entry(_record("spiral_matrix"))
    gym.stop_service()  # started again below, after the secret is set
    monkeypatch.setenv("HISTA_TEST_SECRET", "dummy-secret")
    site = os.path.dirname(os.path.dirname(importlib.util.find_spec("reasoning_gym").origin))

    def took(answer: str) -> tuple[float, str]:
        start = time.monotonic()
        value, why = gym.score("spiral_matrix", {}, entry, answer, timeout=3.0)
        assert why != "scorer timed out after 3 s", answer  # the probes below sleep only on an escape
        return value, time.monotonic() - start

    marker = tmp_path / "written-by-a-scorer"
    took(f"open({str(marker)!r}, 'w').write('x')")
    assert not marker.exists()
    took("[__import__('time').sleep(30) if __import__('os').environ.get('HISTA_TEST_SECRET') else 1]")
    planted = os.path.join(site, "hista_planted.py")
    took(f"[open({planted!r}, 'w').write('x') and __import__('time').sleep(30)]")
    assert not os.path.exists(planted)
    took("__import__('subprocess').Popen([__import__('sys').executable, '-c', "
         "'import time; time.sleep(120)  # hista-survivor-probe'], start_new_session=True)")
    time.sleep(0.5)
    survivors = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"hista-survivor-probe" in f.read():
                    survivors.append(pid)
        except OSError:
            pass
    assert not survivors


def test_nothing_a_call_does_reaches_a_later_call():
    """F2: the poisoning answer is refused by the verifier; handed to the scorer directly it can
    forge only its own reply, and every later call is scored as before. A file a call plants in
    the service's only writable folder is gone by the next call."""
    from hista.rewards import gym

    records = [_record(t, "train") for t in ("spiral_matrix", "basic_arithmetic", "countdown",
                                                "propositional_logic", "gsm_symbolic")]
    assert all(rewards.verify("gym", _boxed("banana"), r["answer"]) == 0.0 for r in records)
    assert rewards.verify_with_reason("gym", _boxed(POISON), records[0]["answer"])[0] == 0.0
    gym.score("spiral_matrix", {}, _entry(records[0]), POISON)
    assert [rewards.verify("gym", _boxed("banana"), r["answer"]) for r in records] == [0.0] * 5
    entry = _entry(records[0])
    gym.score("spiral_matrix", {}, entry, "open(__import__('os').environ['TMPDIR'] + '/planted', 'w').write('x')")
    value, why = gym.score("spiral_matrix", {}, entry,
                           "[__import__('time').sleep(30) if __import__('os').path.exists("
                           "__import__('os').environ['TMPDIR'] + '/planted') else 1]", timeout=3.0)
    assert why == "", why


def test_a_call_that_ends_or_eats_memory_is_named_and_the_next_one_scores():
    """F13: a scorer's process that ends without a reply is reported as such, not as a timeout; a
    call that asks for 2 GB is stopped by its memory limit in moments."""
    from hista.rewards import gym

    record = _record("spiral_matrix")
    entry = _entry(record)
    assert gym.score("spiral_matrix", {}, entry, "__import__('os')._exit(0)") == (
        None, "scorer ended without a reply: exit status 0")
    assert gym.score("spiral_matrix", {}, entry, "__import__('os').kill(__import__('os').getpid(), 9)") == (
        None, "scorer ended without a reply: killed by signal 9 (SIGKILL)")
    start = time.monotonic()
    assert gym.score("spiral_matrix", {}, entry, "len(b'x' * (2 * 10**9))")[0] == 0.0
    assert time.monotonic() - start < 3
    assert rewards.verify("gym", _boxed(record["meta"]["gold"]), record["answer"]) == 1.0


# --------------------------------------------------------------------------- the answers that bought a reward

def _integrand(e: dict) -> str:
    return f"Integral({e['metadata']['integrand']}, {e['metadata']['variable']})"


UNEARNED = [  # (task, split, the answer from the entry) of F4 and F5, each paid 1.0 before
    ("game_of_life_halting", "train", lambda e: "I don't know"),
    ("complex_arithmetic", "train", lambda e: "nan"),
    ("coin_flip", "train", lambda e: "0"),
    ("simple_integration", "train", _integrand),
    ("intermediate_integration", "train",
     lambda e: f"integrate({e['metadata']['integrand']}, {e['metadata']['variable']})"),
    ("polynomial_multiplication", "train", lambda e: "expand(%s)" % e["metadata"]["polynomial_expr"]),
    ("countdown", "train", lambda e: "(%s) and ord(%r)" % (", ".join(map(str, e["metadata"]["numbers"])),
                                                            chr(e["metadata"]["target"]))),
    ("puzzle24", "test", lambda e: "(8 - 7)**5 * 4!"),
    ("puzzle24", "test", lambda e: "6+6+6+6"),
    ("countdown", "test", lambda e: "98 - 45 + 12 + 96 % 60"),
    ("countdown", "test", lambda e: "-(%s)" % e["answer"]),
    ("spiral_matrix", "train", lambda e: POISON),
]


@pytest.mark.parametrize("task, split, make", UNEARNED, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(UNEARNED)])
def test_answers_that_did_not_solve_are_paid_nothing(task, split, make):
    records = tasks.load(f"gym:{task}", n=4, seed=0, split=split)
    for record in records:
        answer = make(_entry(record))
        assert rewards.verify("gym", _boxed(answer), record["answer"]) == 0.0, (task, answer)
        assert rewards.verify("gym", _boxed(record["meta"]["gold"]), record["answer"]) == 1.0


def test_answers_in_the_forms_the_tasks_allow_are_still_paid():
    """The checks refuse code, not answers: an integration answer with elementary functions, a
    polynomial, a countdown expression, puzzle24 with the problem's numbers, a Python list where
    the task reads one (partial credit), a probability as a fraction."""
    cases = [("intermediate_integration", lambda e: e["answer"]),
             ("simple_integration", lambda e: e["answer"].replace(" + C", "")),
             ("countdown", lambda e: e["answer"]),
             ("coin_flip", lambda e: {"0.375": "3/8"}.get(e["answer"], e["answer"]))]
    for task, make in cases:
        for record in tasks.load(f"gym:{task}", n=3, seed=0, split="train"):
            assert rewards.verify("gym", _boxed(make(_entry(record))), record["answer"]) == 1.0, (task, record)
    partial = tasks.load("gym:spiral_matrix?partial=true", n=1, seed=0, split="train")[0]
    as_list = str([int(x) for x in partial["meta"]["gold"].split()])
    assert rewards.verify("gym", _boxed(as_list), partial["answer"]) == pytest.approx(0.1)


# --------------------------------------------------------------------------- problems: determinism and bounds

def test_a_problem_id_means_one_problem_in_every_process():
    """F9: five tasks drew other problems under the same ids when PYTHONHASHSEED differed."""
    script = ("import hashlib, json, logging; logging.disable(30); from hista import tasks\n"
              "for t in ['isomorphic_strings', 'knight_swap', 'polynomial_multiplication', 'ransom_note', "
              "'word_ladder']:\n"
              "    recs = tasks.load('gym:' + t, n=2, seed=0, split='train')\n"
              "    print(t, hashlib.sha1(json.dumps([(r['id'], r['problem'], r['answer']) for r in recs]).encode())"
              ".hexdigest())\n")
    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outputs.append(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      check=True, timeout=600).stdout)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 5


def test_the_arc_tasks_load_and_pay_their_gold():
    """F17: the JSON round trip made the gold boards lists, which the scorers' tuples never equal."""
    for task in ("arc_agi", "rearc"):
        record = tasks.load(f"gym:{task}", n=1, seed=0, split="train")[0]
        assert rewards.verify("gym", _boxed(record["meta"]["gold"]), record["answer"]) == 1.0


def test_a_generator_asked_for_too_much_is_stopped_and_named():
    """F16: 10^8 terms hung the dry run (10^7: 6.8 s and 1.1 GB); the generator now runs in the
    sandbox under its time and memory limits."""
    start = time.monotonic()
    with pytest.raises(InputError, match="generator fails with these options: MemoryError"):
        tasks.load("gym:chain_sum?min_terms=100000000&max_terms=100000000", n=1)
    assert time.monotonic() - start < 60


ADVERSARIAL = {  # answers of at most MAX_ANSWER_CHARS that make a parser nest or re-read
    "parens": "(" * 5000 + "1" + ")" * 4999, "brackets": "[" * 9999, "sums": "1+" * 4999 + "1",
    "unary": "-" * 9999 + "1", "attributes": "a." * 4999 + "a", "calls": "f(" * 4999, "powers": "x**" * 3333 + "2",
    "lambdas": "lambda:" * 1428, "strings": "'a'" * 3333, "lists": "[1," * 3333, "divisions": "1/" * 4999 + "1",
    "f-strings": "f'{" * 3333, "nan-runs": "na" * 5000,
}


@pytest.mark.parametrize("task", sorted(set(EVALUATING) | {"complex_arithmetic", "coin_flip", "decimal_arithmetic",
                                                            "number_sorting", "pool_matrix", "game_of_life_halting"}))
def test_the_checks_cost_little_on_any_answer(task):
    """hista's own work on an answer (parse and check, or score) stays under 0.1 s of CPU time for
    any answer the verifier hands on (at most MAX_ANSWER_CHARS characters)."""
    from hista.rewards import gym_checks
    from hista.rewards.gym import MAX_ANSWER_CHARS

    entry = {"answer": "0.375", "metadata": {"numbers": [1, 2, 3, 4], "variable": "x", "variables": ["x"]}}
    check = gym_checks.RESCORED.get(task) or (lambda answer, e: gym_checks.refusal(task, answer, e))
    for name, answer in ADVERSARIAL.items():
        assert len(answer) <= MAX_ANSWER_CHARS
        best = min(_cpu_seconds(check, answer, entry) for _ in range(3))
        assert best < 0.1, (task, name, best)


def _cpu_seconds(check, answer: str, entry: dict) -> float:
    start = time.process_time()
    check(answer, entry)
    return time.process_time() - start
