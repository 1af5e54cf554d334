"""A property of every ``hista`` command that writes files (issue 29; SPEC §11: a command never
changes a byte of a file that is not its own output): with each of its output paths pointed at
each of its input files — directly, or so that a file it writes beside or inside that output
lands on the input — and at an unrelated file, no byte of any input or of the unrelated file
changes, and no file is left behind."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import pytest
from bad_inputs import CASES_FILE, RECIPE, RESULTS_FILE, changed, snapshot

from hista.cli import main

DATA = Path(__file__).parents[1] / "data"
TASK = b'{"problem": "What is 2 + 3?", "answer": "5"}\n'
UNRELATED = "unrelated.txt"
TINY = ["--model", "tiny", "--max-new-tokens", "4"]


@dataclasses.dataclass
class Command:
    """A command: the input files it reads (name -> bytes, created in a fresh folder beside
    ``unrelated.txt``), ``argv(outputs)`` for its output options, and for each output option
    the ways a target path becomes its value: the path itself, or a path whose sibling or
    member file is the target (``file.md`` -> ``file.json``, whose ``.md`` is written beside it;
    ``dir/values.jsonl`` -> ``dir``)."""

    name: str
    inputs: dict[str, bytes]
    argv: Callable[[dict[str, str]], list[str]]
    outputs: dict[str, list[Callable[[Path], object]]]
    setup: Callable[[Path], dict[str, bytes]] = lambda root: {}


def _same(target: Path) -> str:
    return str(target)


def _member(*names: str) -> Callable[[Path], object]:
    """A folder output whose files ``names`` are written inside it: aimed at an input named so."""
    return lambda target: str(target.parent) if target.name in names else None


def _beside(suffix: str) -> Callable[[Path], object]:
    """A file output that writes ``X<suffix>`` beside ``X.json``: aimed at an input ``X<suffix>``."""
    return lambda target: str(target)[: -len(suffix)] + ".json" if str(target).endswith(suffix) else None


def _eval_parts(root: Path) -> dict[str, bytes]:
    return {f"part{k}.json": (DATA / f"eval_part{k}.json").read_bytes() for k in (1, 2)}


def _sveb_parts(root: Path) -> dict[str, bytes]:
    """Two parts of a sharded tiny build and their manifests."""
    for k in (1, 2):
        out = str(root / f"p{k}.jsonl")
        assert main(["sveb", "build", *TINY, "--tasks", "builtin:arith", "--problems", "2", "--rollouts", "2",
                     "--continuations", "1", "--no-filter", "--shard", f"{k}/2", "--out", out]) == 0
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.name.startswith("p")}


REPORT_FILES = ("report.md", "report.json", "mae.png", "differences.png", "delta.png")
COMMANDS = [
    Command("sample", {"t.jsonl": TASK},
            lambda o: ["sample", *TINY, "--tasks", "jsonl:t.jsonl", "--rollouts", "2", "--out", o["--out"]],
            {"--out": [_same]}),
    Command("tasks filter", {"t.jsonl": TASK},
            lambda o: ["tasks", "filter", "jsonl:t.jsonl", "-n", "1", "--samples", "2", *TINY, "--out", o["--out"]],
            {"--out": [_same]}),
    Command("sveb build", {"t.jsonl": TASK},
            lambda o: ["sveb", "build", *TINY, "--tasks", "jsonl:t.jsonl", "--rollouts", "2", "--continuations", "1",
                       "--no-filter", "--out", o["--out"]],
            {"--out": [_same]}),
    Command("sveb build --shard", {"t.jsonl": TASK, "c.jsonl.shard.json": b'{"shard": [1, 2]}\n'},
            lambda o: ["sveb", "build", *TINY, "--tasks", "jsonl:t.jsonl", "--rollouts", "2", "--continuations", "1",
                       "--no-filter", "--shard", "1/2", "--out", o["--out"]],
            {"--out": [_same, lambda t: str(t)[: -len(".shard.json")] if str(t).endswith(".shard.json") else None]}),
    Command("sveb merge", {}, lambda o: ["sveb", "merge", "p1.jsonl", "p2.jsonl", "--out", o["--out"]],
            {"--out": [_same]}, setup=_sveb_parts),
    Command("sveb eval", {"cases.jsonl": CASES_FILE.read_bytes(), "methods.yaml": b"- grpo\n"},
            lambda o: ["sveb", "eval", "--cases", "cases.jsonl", "--methods-file", "methods.yaml", "--out", o["--out"]],
            {"--out": [_same]}),
    Command("sveb sweep", {"values.jsonl": CASES_FILE.read_bytes()},
            lambda o: ["sveb", "sweep", "--cases", "values.jsonl", "--grid", "interval=2,4", "--out", o["--out"]],
            {"--out": [_same, _member("values.jsonl", "sweep.json", "sweep.md")]}),
    Command("sveb split", {"report.jsonl": CASES_FILE.read_bytes()},
            lambda o: ["sveb", "split", "--cases", "report.jsonl", "--out", o["--out"]],
            {"--out": [_same, _member("selection.jsonl", "report.jsonl")]}),
    Command("sveb report", {"report.json": RESULTS_FILE.read_bytes()},
            lambda o: ["sveb", "report", "--results", "report.json", "--out", o["--out"]],
            {"--out": [_same, _member(*REPORT_FILES)]}),
    Command("sveb run", {"cases.jsonl": TASK},
            lambda o: ["sveb", "run", *TINY, "--tasks", "jsonl:cases.jsonl", "--rollouts", "2", "--continuations",
                       "1", "--no-filter", "--methods", "grpo", "--out", o["--out"]],
            {"--out": [_same, _member("cases.jsonl", "results.json", *REPORT_FILES)]}),
    Command("sveb grad", {"t.jsonl": TASK, "methods.yaml": b"- grpo\n"},
            lambda o: ["sveb", "grad", *TINY, "--tasks", "jsonl:t.jsonl", "--groups", "3", "--group-size", "2",
                       "--methods-file", "methods.yaml", "--out", o["--out"]],
            {"--out": [_same, _member("settings.json", "pool.jsonl", "steps.jsonl", "grad.json", "grad.md")]}),
    Command("critic train", {"cases.jsonl": CASES_FILE.read_bytes()},
            lambda o: ["critic", "train", "--cases", "cases.jsonl", "--mode", "ppo-n", "--lam", "1", "--layers", "0",
                       "--out", o["--out"]],
            {"--out": [_same, _member("train.json", "critic.json")]}),
    Command("train", {"recipe.yaml": RECIPE.replace("output_dir: run", "output_dir: OUT").encode(), "t.jsonl": TASK},
            lambda o: ["train", "recipe.yaml", f"output_dir={o['output_dir']}", "tasks=jsonl:t.jsonl"],
            {"output_dir": [_same, _member("recipe.yaml", "metrics.jsonl")]}),
    Command("eval", {"t.jsonl": TASK},
            lambda o: ["eval", "--model", "tiny", "--suite", "jsonl:t.jsonl", "--max-new-tokens", "4", "--out",
                       o["--out"]],
            {"--out": [_same, _beside(".md"), _beside(".samples.jsonl")]}),
    Command("eval merge", {}, lambda o: ["eval", "merge", "part1.json", "part2.json", "--out", o["--out"]],
            {"--out": [_same, _beside(".md"), _beside(".samples.jsonl")]}, setup=_eval_parts),
    Command("eval compare", {"a.json": (DATA / "eval_results.json").read_bytes(),
                             "b.json": (DATA / "eval_results.json").read_bytes()},
            lambda o: ["eval", "compare", "a.json", "b.json", "--out", o["--out"]],
            {"--out": [_same, lambda t: str(t.with_suffix(".md")) if t.suffix == ".json" else None]}),
]


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_no_output_overwrites_an_input_or_an_unrelated_file(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    probe = tmp_path / "probe"
    probe.mkdir()
    monkeypatch.chdir(probe)
    files = {**command.inputs, **command.setup(probe), UNRELATED: b"my notes\n"}
    tried = 0
    for option, ways in command.outputs.items():
        for w, way in enumerate(ways):
            for k, target in enumerate(files):
                value = way(Path(target))
                if value is None:
                    continue
                root = tmp_path / f"{option.strip('-')}-{w}-{k}"
                root.mkdir()
                monkeypatch.chdir(root)
                for name, data in files.items():
                    (root / name).write_bytes(data)
                before = snapshot(root)
                try:
                    main(command.argv({option: str(value)}))
                except SystemExit:
                    pass
                capsys.readouterr()
                lost = [name for name in changed(before, snapshot(root)) if not name.startswith("+")]
                assert lost == [], f"{command.name} {option}={value!r} changed {lost}"
                tried += 1
    assert tried >= 2


def test_the_table_covers_every_command_that_writes_files():
    """Every subcommand with an output option is in COMMANDS (a new one must be added here)."""
    from hista.cli import build_parser

    writers = set()
    parser = build_parser()
    for action in parser._subparsers._group_actions[0].choices.items():
        name, sub = action
        children = [(f"{name} {n}", p) for a in sub._actions if hasattr(a, "choices") and isinstance(a.choices, dict)
                    for n, p in a.choices.items()] or [(name, sub)]
        for full, p in children:
            if any(opt in ("--out",) for a in p._actions for opt in a.option_strings) or full == "train":
                writers.add(full)
    covered = {c.name.split(" --")[0] for c in COMMANDS} | {"tasks"}  # `hista tasks` writes only in `tasks filter`
    assert writers - covered == set(), writers - covered
