"""Issue 41 through the library: HumanEval data files and code rows without tests are refused
when they load (SPEC §7), a completion or a posed problem that cannot fit the model's context is
refused before anything is sampled (SPEC §7, §10, §11), and a recipe refuses ``rollout_engine: hista`` where the
engine cannot serve the run (SPEC §9). The command-line cases are in
tests/reliability/bad_inputs_engines_and_lengths.py."""

from __future__ import annotations

import gzip
import json

import pytest

from hista import tasks
from hista.errors import InputError
from hista.models import LoadedModel
from hista.rollout import GenerateEngine, SamplingConfig
from hista.rollout.engine import check_context, check_prompts, prompt_ids
from hista.train import load_recipe
from hista.train.recipe import check_model

ROW = {"task_id": "HumanEval/0", "prompt": 'def add(a, b):\n    """The sum of a and b."""\n',
       "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
       "entry_point": "add"}
RECIPE = ("model: tiny\ntasks: builtin:arith?steps=1\nproblems: 4\noutput_dir: run\n"
          "trl:\n  max_steps: 1\n  per_device_train_batch_size: 4\n  num_generations: 4\n  bf16: false\n")


def _lines(*rows: dict) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_humaneval_file_named_by_the_environment(tmp_path, monkeypatch):
    """HISTA_HUMANEVAL_FILE replaces the package's data file, gzipped or plain; its rows are
    checked as they load, a row without test code refused at its line."""
    rows = [ROW, {**ROW, "task_id": "HumanEval/1"}]
    for name, data in (("he.jsonl.gz", gzip.compress(_lines(*rows))), ("he.jsonl", _lines(*rows))):
        (tmp_path / name).write_bytes(data)
        monkeypatch.setenv("HISTA_HUMANEVAL_FILE", str(tmp_path / name))
        records = tasks.load("humaneval:all")
        assert [r["id"] for r in records] == ["HumanEval/0", "HumanEval/1"]
        assert json.loads(records[0]["answer"])["test"] == ROW["test"]
    (tmp_path / "bad.jsonl").write_bytes(_lines(ROW, {**ROW, "task_id": "HumanEval/1", "test": "  \n"}))
    monkeypatch.setenv("HISTA_HUMANEVAL_FILE", str(tmp_path / "bad.jsonl"))
    with pytest.raises(InputError, match="test code is empty") as caught:
        tasks.check_spec("humaneval:all")
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(tmp_path / "bad.jsonl"), 2, "test")


def test_mbpp_row_without_plus_tests_uses_its_asserts_and_a_bad_test_is_refused(tmp_path):
    """An MBPP+-layout row whose ``test`` is null is tested by its ``test_list`` asserts; a
    ``test`` that is neither null nor a string is refused naming the row (SPEC §7)."""
    pytest.importorskip("datasets")
    row = {"task_id": 2, "prompt": "Write a function that adds two numbers.", "test": None, "test_imports": [],
           "code": "def add(a, b):\n    return a + b\n", "test_list": ["assert add(2, 3) == 5"]}
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "test.jsonl").write_bytes(_lines(row))
    (record,) = tasks.load(f"hf:{tmp_path / 'mbpp'}@test")
    assert json.loads(record["answer"])["test"].strip() == "assert add(2, 3) == 5"
    (tmp_path / "mbpp" / "test.jsonl").write_bytes(_lines(row, {**row, "test": ["assert True"]}))
    with pytest.raises(InputError, match="row 1") as caught:
        tasks.load(f"hf:{tmp_path / 'mbpp'}@test")
    assert caught.value.field == "test"


def test_a_completion_must_fit_the_models_context(tiny):
    """The tiny model attends over 4,096 positions: a cap of 4,096 tokens is accepted, 4,097 is
    refused when the engine is made, and a prompt whose tokens with the cap pass the context is
    refused naming it and its token count (SPEC §7)."""
    assert tiny.context == 4096
    assert LoadedModel(None, tiny.tokenizer, "tokenizer only", "r").context is None
    GenerateEngine(tiny, SamplingConfig(max_new_tokens=4096))
    with pytest.raises(InputError, match="context of tiny: 4096") as caught:
        GenerateEngine(tiny, SamplingConfig(max_new_tokens=4097))
    assert caught.value.field == "max_new_tokens"
    check_context(tiny, 96, {"a": 4000, "b": 10})
    with pytest.raises(InputError, match="problem 'b' has a prompt of 4000 tokens"):
        check_context(tiny, 97, {"a": 10, "b": 4000})


def test_problems_are_posed_as_the_engine_poses_them_before_the_check(tiny):
    """``check_prompts`` (eval, sample, tasks filter, sveb build) counts a problem's tokens as
    the engine poses it (chat template, system prompt): a cap that leaves exactly its prompt's
    tokens is accepted, one more refused naming the problem; without a known context (the vllm
    engine) nothing is posed (SPEC §7, §11)."""
    text = "What is 2 + 3? " + "word " * 50
    tokens = len(prompt_ids(tiny, text)[1])
    bare = len(prompt_ids(tiny, text, "")[1])
    assert bare < tokens
    check_prompts(tiny, 4096 - tokens, [("short", "What is 2 + 3?"), ("p", text)])
    with pytest.raises(InputError, match=f"problem 'p' has a prompt of {tokens} tokens, which with {4097 - tokens} "):
        check_prompts(tiny, 4097 - tokens, [("short", "What is 2 + 3?"), ("p", text)])
    check_prompts(tiny, 4097 - tokens, [("p", text)], "")
    with pytest.raises(InputError, match="4097 new tokens"):
        check_prompts(tiny, 4097, [])

    def unposable():
        raise AssertionError("posed without a context to check against")
        yield

    check_prompts(LoadedModel(None, tiny.tokenizer, "tokenizer only", "r"), 10**9, unposable())


def test_recipe_checks_of_the_engine_and_the_completion_length(tmp_path):
    """``rollout_engine: hista`` with top-k is refused (``auto`` falls back to TRL's generation);
    ``trl.max_completion_length`` is checked against the model's context (SPEC §9)."""
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE)
    with pytest.raises(InputError, match="trl.top_k=5") as caught:
        load_recipe(path, ["rollout_engine=hista", "trl.top_k=5"])
    assert caught.value.field == "rollout_engine"
    assert load_recipe(path, ["rollout_engine=auto", "trl.top_k=5"]).rollout_engine == "auto"
    assert check_model(load_recipe(path, ["trl.max_completion_length=4096"])) is None
    with pytest.raises(InputError, match="context of tiny: 4096") as caught:
        check_model(load_recipe(path, ["trl.max_completion_length=4097"]))
    assert caught.value.field == "trl.max_completion_length"
