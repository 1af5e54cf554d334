"""reasoning-gym and CHAMP offline (SPEC §6, §7, §10): the ``gym:`` task source and its splits,
the ``gym`` verifier (the task's own scorer in a worker process, a time bound per call, binary by
default), the ``champ:`` source with its answer check, and the ``gym`` and ``champ`` suites."""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import time

import pytest

from hista import rewards, tasks
from hista.cli import main
from hista.errors import InputError
from hista.evaluation import suites

gym_only = pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None,
                              reason="the gym extra (pip install 'hista[gym]') brings reasoning-gym")
champ_only = pytest.mark.skipif(importlib.util.find_spec("champ_dataset") is None,
                                reason="the gym extra (pip install 'hista[gym]') brings champ-dataset")

SMALL = "gym:chain_sum?min_terms=2&max_terms=2&max_digits=2"


def _score(completion: str, record: dict) -> tuple[float, str]:
    return rewards.verify_with_reason("gym", completion, record["answer"])


# --------------------------------------------------------------------------- the gym: source

@gym_only
def test_splits_share_no_question_and_loads_are_reproducible():
    by_split = {split: tasks.load(SMALL, n=150, seed=0, split=split) for split in ("train", "test", "validation")}
    texts = {split: {r["problem"] for r in records} for split, records in by_split.items()}
    assert all(len(t) == 150 for t in texts.values())  # no question twice in a load
    assert not texts["train"] & texts["test"] and not texts["train"] & texts["validation"]
    assert not texts["test"] & texts["validation"]
    # another seed draws other problems of the same split, never one of another split
    other = {r["problem"] for r in tasks.load(SMALL, n=150, seed=1, split="train")}
    assert other != texts["train"] and not other & (texts["test"] | texts["validation"])
    # problem i does not depend on n, and a load is the same every time
    assert tasks.load(SMALL, n=7, seed=0, split="train") == by_split["train"][:7]
    ids = [r["id"] for r in by_split["train"]]
    assert len(set(ids)) == 150 and ids[0].startswith("gym-chain_sum.")


@gym_only
def test_records_carry_what_the_scorer_needs():
    for record in tasks.load("gym:gsm_symbolic", n=5, seed=0, split="train"):
        gold = record["meta"]["gold"]
        assert record["verifier"] == "gym" and record["field"] == "arithmetic"
        assert record["problem"].endswith("Give your final answer inside \\boxed{}.")
        assert json.loads(record["answer"])["entry"]["answer"] == gold
        assert _score(f"So the total is \\boxed{{{gold}}}.", record) == (1.0, "correct")
        reward, reason = _score(f"\\boxed{{{int(gold) + 1}}}", record)
        assert reward == 0.0 and reason.startswith("wrong answer"), reason


@gym_only
@pytest.mark.parametrize("spec, field, words", [
    ("gym:no_such_task", "spec", "unknown task 'no_such_task'"),
    ("gym:chain_sum?max_term=3", "max_term", "unknown option 'max_term'; valid options: min_terms, max_terms"),
    ("gym:chain_sum?max_terms=three", "max_terms", "bad value 'three'"),
    ("gym:chain_sum?allow_negation=maybe", "allow_negation", "expected true or false"),
    ("gym:chain_sum?min_terms=5&max_terms=3", "spec", "max_terms must be >= min_terms"),
    ("gym:chain_sum?partial=sometimes", "partial", "partial must be true or false"),
    ("gym:chain_sum?max_terms", "max_terms", "must be written name=value"),
    ("gym:", "spec", "name a task"),
    # the task's generator fails on options its validation lets through
    ("gym:simple_equations?operators=+;-", "spec", "reasoning-gym's generator fails with these options"),
    # a question space smaller than the load
    ("gym:count_bits?min_n=1&max_n=3", "spec", "too few distinct questions"),
])
def test_bad_specs_name_what_is_wrong(spec, field, words):
    with pytest.raises(InputError) as caught:
        tasks.load(spec, n=20)
    assert caught.value.field == field and words in str(caught.value)


@gym_only
def test_options_take_their_types(capsys):
    records = tasks.load("gym:basic_arithmetic?min_terms=2&max_terms=2&max_digits=1&operators=+;-"
                         "&allow_parentheses=false&allow_negation=false", n=30)
    assert all(re.fullmatch(r"Calculate \d+ [-+] \d+\.", r["problem"].split("\n")[0]) for r in records)
    assert main(["tasks", "preview", "gym:chain_sum?max_terms=x", "-n", "1"]) == 2
    assert "field 'max_terms'" in capsys.readouterr().err
    assert main(["tasks", "list"]) == 0
    listed = capsys.readouterr().out
    assert "gym (arithmetic):" in listed and "gsm_symbolic" in listed and "gym:" in listed


# --------------------------------------------------------------------------- the gym verifier

@gym_only
def test_the_answer_is_read_as_the_prompt_asks_and_only_once():
    record = tasks.load("gym:gsm_symbolic", n=1, seed=0, split="train")[0]
    gold = record["meta"]["gold"]
    wrong = str(int(gold) + 7)
    assert _score(f"<answer>{gold}</answer>", record)[0] == 1.0  # reasoning-gym's own tag
    assert _score(f"The answer is {gold}.", record)[0] == 1.0  # the math verifier's fallback
    assert _score(f"\\boxed{{{wrong}}} <answer>{gold}</answer>", record)[0] == 0.0  # the box comes first
    assert _score(f"\\boxed{{{gold}}} and then \\boxed{{{wrong}}}", record)[0] == 0.0  # the last box
    assert _score("I do not know.", record) == (0.0, "no answer found")
    # listing candidates never pays: only one answer is scored, and the task's scorer reads its first number
    for hedge in (f"{wrong} or {gold}", f"{wrong}, {gold}", f"{wrong}\n{gold}",
                  " ".join(str(i) for i in range(1000)), f"{wrong} {gold} {gold}"):
        assert _score(f"\\boxed{{{hedge}}}", record)[0] == 0.0, hedge
    assert _score("\\boxed{" + "9" * 20_000 + "}", record)[1].startswith("answer longer than")


@gym_only
def test_binary_by_default_and_partial_credit_on_request():
    plain = tasks.load("gym:gsm_symbolic", n=1, seed=0, split="train")[0]
    partial = tasks.load("gym:gsm_symbolic?partial=true", n=1, seed=0, split="train")[0]
    assert plain["problem"] == partial["problem"]
    wrong = f"\\boxed{{{int(plain['meta']['gold']) + 1}}}"
    assert _score(wrong, plain) == (0.0, f"wrong answer: got {int(plain['meta']['gold']) + 1} (task score 0.01)")
    assert _score(wrong, partial)[0] == pytest.approx(0.01)


@gym_only
def test_a_hanging_scorer_is_cut_off_and_the_next_call_scores():
    """simple_integration's scorer hands the answer to sympy, which does not return on a power
    tower: hista's check refuses it before any scorer runs; handed to the scorer directly, the
    call is cut at the bound, its process killed, and the next answer scored."""
    from hista.rewards import gym

    record = tasks.load("gym:simple_integration", n=1, seed=0, split="train")[0]
    assert _score("\\boxed{9**9**9**9}", record)[1].startswith("answer refused: not an expression the task allows")
    entry = json.loads(record["answer"])["entry"]
    start = time.monotonic()
    assert gym.score("simple_integration", {}, entry, "9**9**9**9", timeout=1.0) == (None, "scorer timed out after 1 s")
    assert time.monotonic() - start < 30
    assert _score(f"\\boxed{{{record['meta']['gold']}}}", record) == (1.0, "correct")


@gym_only
def test_the_worker_scores_and_names_its_errors():
    """The worker's replies: a score, or an error by name (scored 0 by the verifier)."""
    from hista.rewards.gym import score

    entry = {"question": "q", "answer": "7", "metadata": {}}
    assert score("chain_sum", {}, entry, "7") == (1.0, "")
    assert score("chain_sum", {"no_such_option": "1"}, entry, "7") == (
        None, "scorer error: gym:chain_sum: unknown option 'no_such_option'; valid options: min_terms, max_terms, "
        "min_digits, max_digits, allow_negation")
    assert score("chain_sum", {}, entry, "8")[0] < 1


# --------------------------------------------------------------------------- CHAMP

@champ_only
def test_champ_parts_and_the_answer_check(caplog):
    from hista.tasks.champ import checkable

    with caplog.at_level(logging.WARNING):
        every = tasks.load("champ:all")
    train, test = tasks.load("champ:train"), tasks.load("champ:test")
    assert (len(every), len(train), len(test)) == (127, 99, 28)
    assert {r["id"] for r in train} | {r["id"] for r in test} == {r["id"] for r in every}
    assert not {r["id"] for r in train} & {r["id"] for r in test}
    assert {r["field"] for r in every} == {"combinatorics", "inequality", "number-theory", "polynomial", "sequence"}
    for record in every:
        assert record["verifier"] == "math-boxed" and record["problem"].endswith("in \\boxed{}.")
        assert rewards.verify("math-boxed", f"\\boxed{{{record['answer']}}}", record["answer"]) == 1.0, record["id"]
    # an unfinished derivation whose last number happens to be the answer does not pay (math's fallback would)
    # (the embedded model's text on P_Sequence_11, whose answer is 1, cut off at 1,024 tokens)
    one = next(r for r in every if r["answer"] == "1")
    unfinished = "x_{n+1} = 1 + x1 + x2 + x3 + ... + x100 = 1 + x1 + x2 + x3 + ... + x100 = 1 + x1"
    assert rewards.verify("math", unfinished, one["answer"]) == 1.0
    assert rewards.verify_with_reason("math-boxed", unfinished, one["answer"]) == (0.0, "no boxed answer found")
    assert tasks.load("champ:test", n=3) == test[:3]
    # the answers the math verifier cannot check are left out, and said so
    for answer in ("No", "Yes", "3 is the only possible value", "x(x-1)(x-2)...(x-2022)", "Infinitely many solutions"):
        assert checkable(answer) is not None, answer
    for answer in ("239", "x=2, y=1", "(x+y+z)(x^2+y^2+z^2-xy-yz-xz)", "n^2/(n-1)", "sqrt(3)"):
        assert checkable(answer) is None, answer
    with pytest.raises(InputError, match="name the part"):
        tasks.load("champ:dev")


@champ_only
def test_a_bad_champ_file_is_named(tmp_path):
    from hista.tasks.champ import read_problems

    bad = tmp_path / "v0.json"
    bad.write_text(json.dumps({"problems": {"P_1": {"_text": "What is 1+1?", "_answer": "", "category": "x"}}}))
    with pytest.raises(InputError) as caught:
        read_problems(bad)
    assert caught.value.path == str(bad) and caught.value.field == "_answer"


# --------------------------------------------------------------------------- suites

@gym_only
@champ_only
def test_gym_and_champ_suites_run_offline_on_tiny(tmp_path):
    benchmarks, cap, _ = suites.resolve(["gym", "champ"])
    assert {b.category for b in benchmarks} >= {"math"} and len(benchmarks) >= 4
    for b in benchmarks:
        assert len(suites.load_problems(b, limit=2)) == 2
    for suite in ("gym", "champ"):
        out = tmp_path / f"{suite}.json"
        assert main(["eval", "--model", "tiny", "--suite", suite, "--limit", "2", "--max-new-tokens", "8",
                     "--out", str(out)]) == 0
        summary = json.loads(out.read_text())["summary"]["benchmarks"]
        assert set(summary) == {b.name for b in suites.PRESETS[suite].benchmarks}
        assert all(b["problems"] == 2 for b in summary.values())
