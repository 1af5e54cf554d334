"""Property tests of the input boundary (issue 10, SPEC §11): random JSONL task lines, case
records and recipe YAML go through the real commands, which either succeed with a valid result
(exit 0) or refuse with exit 2 and a message naming the file, never with a traceback."""

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hista.cli import main

DATA = Path(__file__).parents[1] / "data"
FUZZ = settings(max_examples=int(os.environ.get("HISTA_FUZZ_EXAMPLES", 150)), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@contextmanager
def _in_temp_folder():
    old = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(old)


def _run(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def _assert_refused_or_ok(code: int, err: str, name: str) -> None:
    assert code in (0, 2), err
    assert "Traceback" not in err
    event(f"exit {code}")
    if code == 2:
        assert f"error: {name}" in err or name in err, err


valid_rows = st.fixed_dictionaries(
    {"problem": st.text(min_size=1, max_size=30).filter(str.strip), "answer": st.integers() | st.text(max_size=8)},
    optional={"id": st.integers() | st.text(min_size=1, max_size=8), "verifier": st.sampled_from(["math", "choice"]),
              "field": st.text(min_size=1, max_size=8), "meta": st.dictionaries(st.text(max_size=4), scalars)})
task_rows = st.fixed_dictionaries({}, optional={
    "problem": json_values | st.text(min_size=1, max_size=30), "answer": json_values | st.integers(),
    "id": json_values, "verifier": st.sampled_from(["math", "choice", "code", "nosuch"]) | json_values,
    "field": json_values, "meta": json_values})
bad_lines = (task_rows.map(json.dumps) | json_values.map(json.dumps) | st.text(max_size=40)
             | st.just('{"problem": "\\ud800", "answer": "1"}') | st.just("[" * 5000 + "]" * 5000))


@FUZZ
@given(lines=st.lists(valid_rows.map(json.dumps), max_size=4), bad=st.none() | bad_lines, at=st.integers(0, 4),
       raw=st.just(b"") | st.binary(max_size=20))
def test_fuzzed_jsonl_task_files(lines, bad, at, raw, capsys):
    if bad is not None:
        lines.insert(at, bad)
    with _in_temp_folder() as root:
        (root / "t.jsonl").write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + b"\n" + raw)
        code, err = _run(["tasks", "preview", "jsonl:t.jsonl", "-n", "2"], capsys)
        _assert_refused_or_ok(code, err, "t.jsonl")


CASE_LINES = (DATA / "sveb_cases_tiny.jsonl").read_text().splitlines()
CASE_PATHS = ["kind", "key", "settings", "settings.model", "settings.revision", "problem", "field", "prompt_ids",
              "rollouts", "rollouts.0", "rollouts.0.completion_ids", "rollouts.0.completion_text",
              "rollouts.0.offsets", "rollouts.0.offsets.0", "rollouts.0.reward", "state", "state.rollout",
              "state.t", "continuations", "continuations.0", "target"]


def _mutate(record: dict, path: str, value, drop: bool) -> dict:
    node, parts = record, path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key = int(parts[-1]) if isinstance(node, list) else parts[-1]
    if drop and isinstance(node, dict):
        node.pop(key)
    else:
        node[key] = value
    return record


@FUZZ
@given(which=st.integers(0, len(CASE_LINES) - 1), path=st.sampled_from(CASE_PATHS),
       value=st.sampled_from([0, 1, 0.0, 1.0, 2, -1, "", "x", [0, 1], [0.0], {}]) | json_values,
       drop=st.booleans(), mutate=st.booleans(), extra=st.lists(json_values.map(json.dumps), max_size=1))
def test_fuzzed_case_records(which, path, value, drop, mutate, extra, capsys):
    lines = list(CASE_LINES)
    if mutate:
        lines[which] = json.dumps(_mutate(json.loads(lines[which]), path, value, drop))
    with _in_temp_folder() as root:
        (root / "c.jsonl").write_text("\n".join(lines + extra) + "\n")
        code, err = _run(["sveb", "eval", "--cases", "c.jsonl", "--methods", "grpo,mc", "--out", "r.json"], capsys)
        _assert_refused_or_ok(code, err, "c.jsonl")
        if code == 0:
            results = json.loads((root / "r.json").read_text())
            assert len(results["cases"]) == len(CASE_LINES)


RECIPE = {"model": "tiny", "tasks": "builtin:arith?steps=1", "problems": 4, "output_dir": "run",
          "trl": {"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8,
                  "bf16": False}}
RECIPE_PATHS = ["model", "tasks", "problems", "split", "seed", "output_dir", "world_size", "resume", "system_prompt",
                "accelerate_config", "advantage_estimator", "advantage_estimator.name",
                "advantage_estimator.gae_lambda", "advantage_estimator.scale", "loss", "loss.name", "loss.eps_low",
                "loss.beta", "trl", "trl.max_steps", "trl.learning_rate", "trl.temperature", "trl.num_generations",
                "trl.per_device_train_batch_size", "trl.bf16", "trl.max_completion_length", "nosuch"]


PLAUSIBLE = {"model": ["tiny", "nosuch", ""], "tasks": ["builtin:choice", ["builtin:arith"], "builtin:arith?steps=9"],
             "problems": [2, 0, None], "split": ["test", "dev"], "seed": [3, -1], "resume": [False, True],
             "world_size": [1, 2], "advantage_estimator.name": ["numca", "hista", "mc"],
             "advantage_estimator.gae_lambda": [0.5, 1.5], "loss.name": ["grpo", "strace", "gspo"],
             "loss.eps_low": [0.1, -1], "loss.beta": [0.0, 0.04], "trl.max_steps": [2, -1, 0],
             "trl.learning_rate": [1.0e-6, -1.0], "trl.temperature": [1.0, 0], "trl.num_generations": [2, 3, 8],
             "trl.per_device_train_batch_size": [8, 2], "trl.bf16": [False], "trl.max_completion_length": [4, 0]}


@FUZZ
@given(edits=st.lists(st.sampled_from(sorted(PLAUSIBLE)).flatmap(
           lambda path: st.tuples(st.just(path), st.sampled_from(PLAUSIBLE[path]))), max_size=2)
       | st.lists(st.tuples(st.sampled_from(RECIPE_PATHS), json_values), min_size=1, max_size=3),
       tail=st.sampled_from(["", "", "", "\n: [", "\nbase: nosuch.yaml", "\n\t- x", "\nmodel: {a: [}"]))
def test_fuzzed_recipes(edits, tail, capsys):
    recipe = json.loads(json.dumps(RECIPE))
    for path, value in edits:
        head, _, last = path.rpartition(".")
        node = recipe
        if head:
            if not isinstance(node.get(head), dict):
                node[head] = {}
            node = node[head]
        node[last] = value
    with _in_temp_folder() as root:
        (root / "recipe.yaml").write_text(yaml.safe_dump(recipe) + tail)
        code, err = _run(["train", "recipe.yaml", "--dry-run"], capsys)
        _assert_refused_or_ok(code, err, "recipe.yaml")
