"""Bad inputs of the evaluation commands (issue 29: ``hista eval``, ``hista eval merge``, ``hista
eval compare``), for the table of ``tests/reliability/bad_inputs.py``: each case exits 2 with one located
message and changes or creates no file.

The files come from real runs of the CLI on the tiny model, committed under ``tests/data/``:

    A="--model tiny --suite builtin --limit 2 --batch-size 2 --max-new-tokens 4 --device cpu"
    hista eval $A --out eval_results.json                 # the whole evaluation (2 + 2 problems)
    hista eval $A --shard 1/2 --out eval_part1.json       # arith's chunk
    hista eval $A --shard 2/2 --out eval_part2.json       # choice's chunk

Each case copies them and changes one thing (drops a field, sets ``reward: "x"``, ...). A part's
per-problem file and a resumed evaluation's header are made the way ``hista eval`` writes them
(:func:`hista.jsonio.dumps_line`) from the committed results.
"""

from __future__ import annotations

import copy
import json

from bad_inputs import DATA, Case

from hista.jsonio import dumps_line

WHOLE_FILE, PART1_FILE, PART2_FILE = DATA / "eval_results.json", DATA / "eval_part1.json", DATA / "eval_part2.json"

#: ``hista eval`` with the settings of the committed results, into ``v.json``
EVAL = ["eval", "--model", "tiny", "--suite", "builtin", "--limit", "2", "--batch-size", "2", "--max-new-tokens", "4",
        "--device", "cpu", "--out", "v.json"]
MERGE = ["eval", "merge", "--out", "merged.json", "p1.json", "p2.json"]
COMPARE = ["eval", "compare", "a.json", "b.json"]


def _load(path) -> dict:
    return json.loads(path.read_text())


def _dump(data: dict) -> bytes:
    return json.dumps(data, indent=1).encode()


def _set(data: dict, key: str, value) -> None:
    """Set the dotted ``key`` (list indices as numbers) of ``data``; ``value`` DROP deletes it."""
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = int(parts[-1]) if isinstance(node, list) else parts[-1]
    if value is DROP:
        del node[last]
    else:
        node[last] = value


DROP = object()


def _changed(path, changes: dict) -> bytes:
    data = copy.deepcopy(_load(path))
    for key, value in changes.items():
        _set(data, key, value)
    return _dump(data)


def _parts(first: dict | None = None, both: dict | None = None) -> dict[str, bytes]:
    """The two parts as ``p1.json`` and ``p2.json``; ``first`` changes the first only, ``both``
    both (settings must agree between parts, or merge refuses them for that)."""
    return {"p1.json": _changed(PART1_FILE, {**(both or {}), **(first or {})}),
            "p2.json": _changed(PART2_FILE, both or {})}


def _runs(second: dict | None = None, both: dict | None = None) -> dict[str, bytes]:
    """The whole evaluation twice, as ``a.json`` and ``b.json``; ``second`` changes ``b.json``
    only, ``both`` both (compare refuses differing settings for that)."""
    return {"a.json": _changed(WHOLE_FILE, both or {}),
            "b.json": _changed(WHOLE_FILE, {**(both or {}), **(second or {})})}


def _header(data: dict, **settings) -> str:
    """The settings header ``hista eval`` writes first into the per-problem file of ``data``."""
    header = {"kind": "settings", "settings": {**data["settings"], **settings},
              "hista_version": data["versions"]["hista"]}
    if "shard" in data:
        header["shard"] = data["shard"]["part"]
    return dumps_line(header)


def _samples_file(data: dict, cut: bool = False, **settings) -> bytes:
    """The per-problem file of ``data`` (header, then its problems); ``cut``: only the header
    and the first half of the first problem's line, as a crash mid-write leaves it."""
    lines = [_header(data, **settings)] + [dumps_line(r) for r in data["problems"]]
    if cut:
        lines = lines[:1] + [lines[1][: len(lines[1]) // 2]]
    return "".join(lines).encode()


def _with(argv: list[str], option: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(option) + 1] = value
    return out


def cases() -> list[Case]:
    """Every bad input of the evaluation commands, in the order of issue 29's items (2, 3, 10,
    11, 1)."""
    whole, part1 = _load(WHOLE_FILE), _load(PART1_FILE)
    runs = _runs()
    engine = {**whole["settings"]["engine"], "transformers": "4.0.0"}
    reward = "problems.0.samples.0.reward"
    table: list[Case] = [
        # 2. an output that is one of the command's inputs (or a file written beside one)
        Case("eval compare --out a.md writes a.json, an input", [*COMPARE, "--out", "a.md"], ("a.json", "a.md"), runs),
        Case("eval compare --out c.md where c.json is a symlink to an input", [*COMPARE, "--out", "c.md"],
             ("c.json", "a.json"), {**runs, "c.json": ("->", "a.json")}),
        Case("eval merge --out p1.json p1.json p2.json", _with(MERGE, "--out", "p1.json"), ("p1.json", "input"),
             _parts()),
        Case("eval merge writes OUT.md over a part named p2.md",
             ["eval", "merge", "--out", "p2.json", "p1.json", "p2.md"], ("p2.md", "p2.json"),
             {"p1.json": _changed(PART1_FILE, {}), "p2.md": _changed(PART2_FILE, {})}),
        Case("eval merge --out over a part's per-problem file", _with(MERGE, "--out", "p1.samples.jsonl"),
             ("p1.samples.jsonl",), {**_parts(), "p1.samples.jsonl": _samples_file(part1)}),
        Case("eval --out r.json writes r.md, its jsonl: task file", _with(_with(EVAL, "--suite", "jsonl:r.md"),
                                                                          "--out", "r.json"),
             ("r.md", "r.json"), {"r.md": b'{"problem": "What is 1 + 1?", "answer": "2", "verifier": "math"}\n'}),
        # 3. merge with bad versions: it wrote OUT.json and OUT.md, then crashed
        Case("eval merge with versions a string", MERGE, ("p1.json", "versions"), _parts({"versions": "x"})),
        Case("eval merge with versions.hista a number", MERGE, ("p1.json", "versions.hista"),
             _parts({"versions.hista": 1})),
        # 10. merge trusted the parts' contents
        Case("eval merge with reward 'x'", MERGE, ("p1.json", "problems[0].samples[0].reward"), _parts({reward: "x"})),
        Case("eval merge with reward 7", MERGE, ("p1.json", "problems[0].samples[0].reward"), _parts({reward: 7})),
        Case("eval merge with a problem without samples", MERGE, ("p1.json", "problems[0].samples"),
             _parts({"problems.0.samples": DROP})),
        Case("eval merge with a renamed benchmark", MERGE, ("p1.json", "problems[0].benchmark"),
             _parts({"problems.0.benchmark": "arith2"})),
        Case("eval merge without settings.benchmarks", MERGE, ("p1.json", "settings.benchmarks"),
             _parts(both={"settings.benchmarks": DROP})),
        Case("eval merge without settings.seed", MERGE, ("p1.json", "settings.seed"),
             _parts(both={"settings.seed": DROP})),
        Case("eval merge without versions", MERGE, ("p1.json", "versions"), _parts({"versions": DROP})),
        Case("eval merge with versions a list", MERGE, ("p1.json", "versions"), _parts({"versions": ["0.1.0"]})),
        # 11. compare trusted its results files
        Case("eval compare without settings.benchmarks", COMPARE, ("a.json", "settings.benchmarks"),
             _runs(both={"settings.benchmarks": DROP})),
        Case("eval compare with settings.benchmarks an object", COMPARE, ("a.json", "settings.benchmarks"),
             _runs(both={"settings.benchmarks": {"arith": {}}})),
        Case("eval compare without model.name", COMPARE, ("b.json", "model.name"), _runs({"model.name": DROP})),
        Case("eval compare with model.name a list", COMPARE, ("b.json", "model.name"), _runs({"model.name": ["tiny"]})),
        Case("eval compare without model.revision", COMPARE, ("b.json", "model.revision"),
             _runs({"model.revision": DROP})),
        Case("eval compare without a benchmark's category", COMPARE, ("a.json", "settings.benchmarks[0].category"),
             _runs(both={"settings.benchmarks.0.category": DROP})),
        Case("eval compare with a benchmark a list", COMPARE, ("a.json", "settings.benchmarks[0]"),
             _runs(both={"settings.benchmarks.0": ["arith"]})),
        # 1. the per-problem file is identified before an unterminated last line is cut off
        Case("eval over a one-line v.samples.jsonl without a newline", EVAL, ("v.samples.jsonl",),
             {"v.samples.jsonl": b'{"mine": 1}'}),
        Case("eval over a one-line text v.samples.jsonl without a newline", EVAL, ("v.samples.jsonl",),
             {"v.samples.jsonl": b"my notes, not JSON"}),
        Case("eval over a foreign v.samples.jsonl with a cut last line", EVAL, ("v.samples.jsonl:1", "kind"),
             {"v.samples.jsonl": b'{"mine": 1}\n{"mine": 2'}),
        Case("eval resuming a cut per-problem file of other settings", EVAL, ("v.samples.jsonl:1", "max_new_tokens"),
             {"v.samples.jsonl": _samples_file(whole, cut=True, max_new_tokens=8)}),
        Case("eval resuming a cut per-problem file of another engine", EVAL, ("v.samples.jsonl:1", "engine"),
             {"v.samples.jsonl": _samples_file(whole, cut=True, engine=engine)}),
    ]
    return table
