"""The table of bad inputs of the CLI (issue 10): each entry is a command line, the files it
finds in its working folder, and what its error message must name. Used by
``tests/reliability/test_bad_inputs.py`` (every entry exits 2 with a located message, no traceback, and
leaves every file as it was) and by ``tests/helpers/bad_inputs_table.py`` (the same table run as real
processes, for a before/after table of exit codes)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

DATA = Path(__file__).parents[1] / "data"
CASES_FILE = DATA / "sveb_cases_tiny.jsonl"
RESULTS_FILE = DATA / "sveb_results_tiny.json"

FIFO, DIR = "<fifo>", "<dir>"

SAMPLE = ["sample", "--model", "tiny", "--tasks", "builtin:arith", "--problems", "1", "--rollouts", "2",
          "--max-new-tokens", "4", "--out", "out.jsonl"]
BUILD = ["sveb", "build", "--model", "tiny", "--tasks", "builtin:arith", "--problems", "1", "--rollouts", "2",
         "--continuations", "2", "--max-new-tokens", "4", "--out", "cases.jsonl"]
FILTER = ["tasks", "filter", "builtin:arith", "-n", "1", "--samples", "2", "--model", "tiny", "--max-new-tokens", "4",
          "--out", "kept.jsonl"]
EVAL = ["sveb", "eval", "--cases", "cases.jsonl", "--methods", "grpo", "--out", "results.json"]
REPORT = ["sveb", "report", "--results", "results.json", "--out", "report"]
SWEEP = ["sveb", "sweep", "--cases", "cases.jsonl", "--grid", "layer=-1,-2", "--out", "sweep"]
METHODS_FILE = ["sveb", "eval", "--cases", "cases.jsonl", "--methods-file", "methods.yaml", "--out", "results.json"]
RECIPE = ("model: tiny\ntasks: builtin:arith?steps=1\nproblems: 4\noutput_dir: run\n"
          "trl:\n  max_steps: 1\n  per_device_train_batch_size: 4\n  num_generations: 4\n"
          "  max_completion_length: 8\n  bf16: false\n")


def _with(argv: list[str], option: str, value: str) -> list[str]:
    """``argv`` with ``option`` set to ``value`` (replaced when present, else appended)."""
    out = list(argv)
    if option in out:
        out[out.index(option) + 1] = value
        return out
    return out + [option, value]


def _case_lines() -> list[dict]:
    return [json.loads(line) for line in CASES_FILE.read_text().splitlines()]


def _cases(mutate: Callable[[dict], None], *, raw: Optional[str] = None) -> dict[str, bytes]:
    """A cases file whose first record went through ``mutate`` (or whose first line is ``raw``)."""
    records = _case_lines()
    mutate(records[0])
    lines = [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in records]
    if raw is not None:
        lines[0] = raw
    return {"cases.jsonl": ("\n".join(lines) + "\n").encode()}


def _results(text: str) -> dict[str, bytes]:
    return {"results.json": text.encode()}


def _recipe(text: str) -> dict[str, bytes]:
    return {"recipe.yaml": text.encode()}


def _drop(key: str) -> Callable[[dict], None]:
    return lambda r: r.pop(key)


def _set(key: str, value) -> Callable[[dict], None]:
    def mutate(r: dict) -> None:
        node = r
        parts = key.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(parts[-1]) if isinstance(node, list) else parts[-1]] = value
    return mutate


def _truncated_cache(root: Path) -> None:
    """A HISTA_CACHE whose converted embedded model has a truncated ``model.safetensors`` (the
    tiny model's weights stand in for the real ones: only the damage matters)."""
    from hista.models import load

    lm = load("tiny", device="cpu")
    target = root / "cache" / "models" / "smollm2-135m-instruct"
    lm.model.save_pretrained(target)
    lm.tokenizer.save_pretrained(target)
    weights = target / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


@dataclass
class Case:
    """One bad input: ``argv`` run in a folder holding ``files`` (name -> bytes, FIFO, DIR or
    ('->', target) for a symlink); the message must contain every string of ``names``."""

    id: str
    argv: list[str]
    names: tuple[str, ...]
    files: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    setup: Optional[Callable[[Path], None]] = None


def cases() -> list[Case]:
    """Every bad input of the table, in the order of the issue."""
    valid_cases = {"cases.jsonl": CASES_FILE.read_bytes()}
    valid_results = {"results.json": RESULTS_FILE.read_bytes()}
    first = CASES_FILE.read_text().splitlines()[0] + "\n"
    earlier = {"run/metrics.jsonl": b'{"step": 1, "loss": 0.5}\n'}
    table = [
        # 1. outputs that would damage something or cannot be written
        Case("sample --out FIFO", _with(SAMPLE, "--out", "pipe"), ("pipe", "FIFO"), {"pipe": FIFO}),
        Case("sample --out symlink to FIFO", _with(SAMPLE, "--out", "link"), ("link", "FIFO"),
             {"pipe": FIFO, "link": ("->", "pipe")}),
        Case("sample --out DIR", _with(SAMPLE, "--out", "folder"), ("folder", "directory"), {"folder": DIR}),
        Case("sample --out FILE/x (parent is a file)", _with(SAMPLE, "--out", "plain/x.jsonl"), ("plain",),
             {"plain": b"keep me\n"}),
        Case("sample --out /proc/...", _with(SAMPLE, "--out", "/proc/hista-test/x.jsonl"), ("/proc",)),
        Case("tasks filter --out FIFO", _with(FILTER, "--out", "pipe"), ("pipe", "FIFO"), {"pipe": FIFO}),
        Case("sveb build --out FIFO", _with(BUILD, "--out", "pipe"), ("pipe", "FIFO"), {"pipe": FIFO}),
        Case("sveb build --out DIR", _with(BUILD, "--out", "folder"), ("folder", "directory"), {"folder": DIR}),
        Case("sveb eval --out FIFO", _with(EVAL, "--out", "pipe"), ("pipe", "FIFO"), {"pipe": FIFO, **valid_cases}),
        Case("sveb eval --out DIR", _with(EVAL, "--out", "folder"), ("folder", "directory"),
             {"folder": DIR, **valid_cases}),
        Case("sveb report --out FILE", _with(REPORT, "--out", "plain"), ("plain", "not a directory"),
             {"plain": b"keep me\n", **valid_results}),
        Case("sveb report --out DIR with report.md a FIFO", REPORT, ("report.md", "FIFO"),
             {"report": DIR, "report/report.md": FIFO, **valid_results}),
        Case("sveb run --out FILE", ["sveb", "run", "--model", "tiny", "--out", "plain"], ("plain",),
             {"plain": b"keep me\n"}),
        Case("train output_dir is a file", ["train", "recipe.yaml"], ("output_dir",),
             {**_recipe(RECIPE), "run": b"keep me\n"}),
        # 2. a failed rerun must not destroy an earlier run
        Case("train rerun with a bad task file keeps metrics.jsonl",
             ["train", "recipe.yaml", "tasks=jsonl:bad.jsonl"], ("bad.jsonl", "1"),
             {**_recipe(RECIPE), **earlier, "bad.jsonl": b'{"problem": "x"}\n'}),
        Case("train rerun that fails on bf16 keeps metrics.jsonl", ["train", "recipe.yaml"], ("recipe.yaml", "bf16"),
             {**_recipe(RECIPE.replace("bf16: false", "bf16: true")), **earlier}),
        Case("train fresh run over an earlier run", ["train", "recipe.yaml"], ("run", "metrics.jsonl", "--overwrite"),
             {**_recipe(RECIPE), **earlier}),
        # 3. numeric options out of range
        Case("sample --rollouts 0", _with(SAMPLE, "--rollouts", "0"), ("--rollouts",)),
        Case("sample --problems -1", _with(SAMPLE, "--problems", "-1"), ("--problems",)),
        Case("sample --batch-size 0", SAMPLE + ["--batch-size", "0"], ("--batch-size",)),
        Case("sample --max-new-tokens 0", _with(SAMPLE, "--max-new-tokens", "0"), ("--max-new-tokens",)),
        Case("sample --temperature -1", SAMPLE + ["--temperature", "-1"], ("--temperature",)),
        Case("sample --temperature nan", SAMPLE + ["--temperature", "nan"], ("--temperature",)),
        Case("sample --top-p 2", SAMPLE + ["--top-p", "2"], ("--top-p",)),
        Case("sample --top-p 0", SAMPLE + ["--top-p", "0"], ("--top-p",)),
        Case("sample --device bogus", SAMPLE + ["--device", "bogus"], ("--device", "bogus")),
        Case("sample --seed -1", SAMPLE + ["--seed", "-1"], ("--seed",)),
        Case("sveb build --continuations 0", _with(BUILD, "--continuations", "0"), ("--continuations",)),
        Case("sveb build --rollouts 1", _with(BUILD, "--rollouts", "1"), ("--rollouts",)),
        Case("sveb build --states-per-problem 0", BUILD + ["--states-per-problem", "0"], ("--states-per-problem",)),
        Case("sveb build --lo 0.9 --hi 0.1", BUILD + ["--lo", "0.9", "--hi", "0.1"], ("lo", "hi")),
        Case("sveb build --hi 1.5", BUILD + ["--hi", "1.5"], ("--hi",)),
        Case("sveb build --problems 0", _with(BUILD, "--problems", "0"), ("--problems",)),
        Case("sveb run --continuations 0", ["sveb", "run", "--continuations", "0", "--out", "r"], ("--continuations",)),
        Case("sveb eval --device bogus", EVAL + ["--device", "bogus"], ("--device",), valid_cases),
        Case("sveb eval --methods ''", _with(EVAL, "--methods", ""), ("methods",), valid_cases),
        Case("sveb eval --methods nosuch", _with(EVAL, "--methods", "nosuch"), ("nosuch",), valid_cases),
        Case("sveb eval hista?stride=abc", _with(EVAL, "--methods", "hista?stride=abc"), ("hista?stride=abc", "stride"),
             valid_cases),
        Case("sveb eval hista?nokey=1", _with(EVAL, "--methods", "hista?nokey=1"), ("hista?nokey=1", "nokey"),
             valid_cases),
        Case("sveb eval --methods-file missing", METHODS_FILE, ("methods.yaml",), valid_cases),
        Case("sveb eval --methods-file FIFO", METHODS_FILE, ("methods.yaml", "regular file"),
             {**valid_cases, "methods.yaml": FIFO}),
        Case("sveb eval --methods-file with a bad entry", METHODS_FILE, ("methods.yaml", "methods[1]"),
             {**valid_cases, "methods.yaml": b"- grpo\n- [1, 2]\n"}),
        Case("sveb sweep --grid layer", _with(SWEEP, "--grid", "layer"), ("--grid", "layer"), valid_cases),
        Case("sveb sweep --grid with an unknown key", _with(SWEEP, "--grid", "nokey=1,2"), ("--grid", "nokey"),
             valid_cases),
        Case("sveb sweep --folds 3 on 2 problems", SWEEP + ["--folds", "3"], ("--folds",), valid_cases),
        Case("sveb sweep over another sweep's values", SWEEP, ("values.jsonl", "another --out"),
             {**valid_cases, "sweep/values.jsonl": b'{"kind": "sweep", "specs": ["grpo"]}\n'}),
        Case("tasks filter --lo 0.9 --hi 0.1", FILTER + ["--lo", "0.9", "--hi", "0.1"], ("--lo",)),
        Case("tasks filter --samples 0", _with(FILTER, "--samples", "0"), ("--samples",)),
        Case("62 tasks filter --samples 10^14", _with(FILTER, "--samples", "100000000000000"), ("--samples", "1024")),
        Case("62 tasks preview gym:chain_sum with 10^8 terms (hung the dry run)",
             ["tasks", "preview", "gym:chain_sum?min_terms=100000000&max_terms=100000000", "-n", "1"],
             ("spec", "MemoryError")),
        Case("tasks preview -n -1", ["tasks", "preview", "builtin:arith", "-n", "-1"], ("-n",)),
        # 3. JSONL task files
        Case("jsonl task with a lone surrogate", ["tasks", "preview", "jsonl:t.jsonl"], ("t.jsonl:1", "surrogate"),
             {"t.jsonl": b'{"problem": "\\ud800", "answer": "1"}\n'}),
        Case("jsonl task nested 100k deep", ["tasks", "preview", "jsonl:t.jsonl"], ("t.jsonl:1", "nested"),
             {"t.jsonl": b"[" * 100_000 + b"]" * 100_000 + b"\n"}),
        Case("jsonl task with NaN", ["tasks", "preview", "jsonl:t.jsonl"], ("t.jsonl:1", "NaN"),
             {"t.jsonl": b'{"problem": "x", "answer": NaN}\n'}),
        Case("empty jsonl task file", SAMPLE[:3] + ["--tasks", "jsonl:t.jsonl", "--out", "out.jsonl"],
             ("t.jsonl", "no problems"),
             {"t.jsonl": b"\n\n"}),
        # 3./4. case files
        Case("case without field", EVAL, ("cases.jsonl:1", "field"), _cases(_drop("field"))),
        Case("case without settings", EVAL, ("cases.jsonl:1", "settings"), _cases(_drop("settings"))),
        Case("case with empty settings", EVAL, ("cases.jsonl:1", "settings"), _cases(_set("settings", {}))),
        Case("case with string continuations", EVAL, ("cases.jsonl:1", "continuations"),
             _cases(_set("continuations", ["0", "0", "0"]))),
        Case("case with too few offsets", EVAL, ("cases.jsonl:1", "offsets"),
             _cases(_set("rollouts.0.offsets", [[0, 1]]))),
        Case("case with offsets past the text", EVAL, ("cases.jsonl:1", "offsets"),
             _cases(lambda r: r["rollouts"][0]["offsets"].__setitem__(0, [0, 10_000]))),
        Case("case with a token id that is not an int", EVAL, ("cases.jsonl:1", "completion_ids"),
             _cases(lambda r: r["rollouts"][0]["completion_ids"].__setitem__(0, "x"))),
        Case("case with target 1.5", EVAL, ("cases.jsonl:1", "target"), _cases(_set("target", 1.5))),
        Case("case with boolean target", EVAL, ("cases.jsonl:1", "target"), _cases(_set("target", True))),
        Case("case whose target is not the mean of its continuations", EVAL, ("cases.jsonl:1", "target"),
             _cases(lambda r: r.update(target=0.5, continuations=[0.0, 0.0, 0.0]))),
        Case("case with NaN target", EVAL, ("cases.jsonl:1", "NaN"),
             _cases(lambda r: None, raw=json.dumps({**_case_lines()[0], "target": float("nan")}))),
        Case("case with reward 2", EVAL, ("cases.jsonl:1", "reward"), _cases(_set("rollouts.0.reward", 2.0))),
        Case("case with a duplicated key", EVAL, ("cases.jsonl:2", "key"), {"cases.jsonl": (first * 2).encode()}),
        Case("case with a lone surrogate", EVAL, ("cases.jsonl:1", "surrogate"),
             _cases(lambda r: None, raw=json.dumps(_case_lines()[0])[:-1] + ', "x": "\\udc00"}')),
        Case("case file not UTF-8", EVAL, ("cases.jsonl:1", "UTF-8"), {"cases.jsonl": b'{"kind": "case\xff"}\n'}),
        Case("cases file is a FIFO", EVAL, ("cases.jsonl",), {"cases.jsonl": FIFO}),
        # 3. results files
        Case("sveb report on an empty results file", REPORT, ("results.json",), _results("")),
        Case("sveb report on truncated results", REPORT, ("results.json",),
             _results(RESULTS_FILE.read_text()[:200])),
        Case("sveb report on {}", REPORT, ("results.json",), _results("{}")),
        Case("sveb report on null", REPORT, ("results.json",), _results("null")),
        Case("sveb report on a row without values", REPORT, ("results.json", "values"),
             _results(json.dumps({**json.loads(RESULTS_FILE.read_text()),
                                  "cases": [{**c, "values": None} for c in
                                            json.loads(RESULTS_FILE.read_text())["cases"]]}))),
        Case("sveb report on a missing file", REPORT, ("results.json",)),
        # 3./4. recipes
        Case("recipe tasks: 42", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml", "tasks"),
             _recipe(RECIPE.replace("tasks: builtin:arith?steps=1", "tasks: 42"))),
        Case("recipe batch size '8'", ["train", "recipe.yaml", "--dry-run"],
             ("recipe.yaml", "per_device_train_batch_size"),
             _recipe(RECIPE.replace("per_device_train_batch_size: 4", "per_device_train_batch_size: '8'"))),
        Case("recipe gae_lambda: x", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml", "gae_lambda"),
             _recipe(RECIPE + "advantage_estimator:\n  name: grpo\n  gae_lambda: x\n")),
        Case("recipe not UTF-8", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml", "UTF-8"),
             {"recipe.yaml": RECIPE.encode() + b"# \xff\xfe\n"}),
        Case("override with bad YAML", ["train", "recipe.yaml", "trl.max_steps=[", "--dry-run"], ("trl.max_steps",),
             _recipe(RECIPE)),
        Case("recipe resume: 'no'", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml", "resume"),
             _recipe(RECIPE + "resume: 'no'\n")),
        Case("recipe max_steps: -3", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml", "max_steps"),
             _recipe(RECIPE.replace("max_steps: 1", "max_steps: -3"))),
        Case("recipe learning_rate: fast", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml", "learning_rate"),
             _recipe(RECIPE + "  learning_rate: fast\n")),
        Case("recipe temperature: -1", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml", "temperature"),
             _recipe(RECIPE + "  temperature: -1\n")),
        Case("recipe max_completion_length: -16", ["train", "recipe.yaml", "--dry-run"],
             ("recipe.yaml", "max_completion_length"),
             _recipe(RECIPE.replace("max_completion_length: 8", "max_completion_length: -16"))),
        Case("CPU recipe with bf16", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml", "bf16"),
             _recipe(RECIPE.replace("bf16: false", "bf16: true"))),
        Case("recipe file missing", ["train", "recipe.yaml", "--dry-run"], ("recipe.yaml",)),
        # 3./5. environment and models
        Case("HISTA_CACHE is a file", ["models", "prepare"], ("HISTA_CACHE",), {"cachefile": b"keep me\n"},
             env={"HISTA_CACHE": "cachefile"}),
        Case("truncated model.safetensors in the cache", _with(SAMPLE, "--model", "smollm2-135m-instruct"),
             ("model.safetensors",), env={"HISTA_CACHE": "cache"}, setup=_truncated_cache),
        Case("unknown hub model id", _with(SAMPLE, "--model", "nosuchowner/nosuchmodel"), ("nosuchowner/nosuchmodel",),
             env={"HISTA_HF_TIMEOUT": "2"}),
    ]
    from bad_inputs_critic import cases as critic_cases  # these modules build on this one
    from bad_inputs_engines_and_lengths import cases as engine_and_length_cases
    from bad_inputs_evaluation import cases as evaluation_cases
    from bad_inputs_files import cases as file_cases
    from bad_inputs_resume import cases as resume_cases
    from bad_inputs_train_outputs import cases as train_output_cases

    return (table + file_cases() + evaluation_cases() + critic_cases() + engine_and_length_cases() + resume_cases()
            + train_output_cases())


def make_files(root: Path, case: Case) -> None:
    """Create the files of ``case`` under ``root``."""
    for name, content in case.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == FIFO:
            os.mkfifo(path)
        elif content == DIR:
            path.mkdir(exist_ok=True)
        elif isinstance(content, tuple):
            os.symlink(content[1], path)
        else:
            path.write_bytes(content)
    if case.setup is not None:
        case.setup(root)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: its kind and, for regular files, its bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("symlink", os.readlink(path))
            elif path.is_fifo():
                out[rel] = ("fifo",)
            elif path.is_dir():
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", path.read_bytes())
    return out


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """Entries of ``before`` that are gone or different in ``after``, and entries of ``after``
    that ``before`` did not have (a refused command writes nothing: issue 29), the latter
    marked ``+``."""
    gone = [name for name, entry in before.items() if after.get(name) != entry]
    return sorted(gone) + sorted(f"+{name}" for name in after if name not in before)
