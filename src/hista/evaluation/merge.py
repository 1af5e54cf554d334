"""``hista eval merge``: join the results of a sharded evaluation.

``hista eval --shard K/N`` evaluates every N-th chunk of problems from chunk K-1, over all
benchmarks in order, with the seeds a whole evaluation uses, so its problems' samples are those a
whole evaluation draws on the same engine. Each part's results file holds its problems and,
under ``"shard"``, the part and every problem key of the whole evaluation. Merging checks
that the parts come from one evaluation and cover every problem once, then writes the results,
the table and the per-problem file a whole evaluation writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import InputError
from ..jsonio import check_output_file, dumps_line, write_atomic, write_json_atomic
from ..schema import Where, short
from . import store
from .report import result_markdown
from .run import FORMAT, check_outputs_not_inputs, read_results, results_markdown_path
from .summary import summarise


def _shard(data: dict, path: Path) -> tuple[int, int, list[str]]:
    shard = data.get("shard")
    where = Where(path)
    if not isinstance(shard, dict):
        where.fail("not the results of a shard (hista eval --shard K/N writes one)", "shard")
    part, keys = shard.get("part"), shard.get("keys")
    if not (isinstance(part, list) and len(part) == 2 and all(type(x) is int for x in part)
            and 1 <= part[0] <= part[1]):
        where.fail(f"expected [K, N] with 1 <= K <= N, got {part!r}", "shard.part")
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        where.fail("expected the list of every problem key", "shard.keys")
    return part[0], part[1], keys


def _versions(data: dict, path: Path) -> dict:
    """The ``versions`` of a part, which the merged results and per-problem file record: an
    object whose values are strings, ``hista`` among them."""
    versions = data.get("versions")
    where = Where(path)
    if not isinstance(versions, dict):
        where.fail("missing, or not an object of the versions of hista, torch and transformers", "versions")
    if not isinstance(versions.get("hista"), str):
        where.fail(f"expected the hista version (a string), got {short(versions.get('hista'))}", "versions.hista")
    return versions


def merge(parts: Sequence[str | Path], out: str | Path) -> str:
    """Join the results files of every shard of one evaluation into ``out``: the
    problems in the whole evaluation's order, the summary over all of them, ``results.md`` and
    the per-problem file beside it. Refuses, naming the file (and field), an output that is one
    of the parts (or a part's per-problem file), a part that is not a shard's results (every
    record goes through the checks ``hista eval compare`` uses:
    :func:`hista.evaluation.run.check_results`), bad ``versions``, parts of different
    evaluations (settings, model revision or N differ), a shard given twice or missing, and a
    problem that is missing, repeated or foreign. Nothing is written until every check has
    passed. Returns the table."""
    out = Path(out)
    samples_file, markdown_file = store.samples_path(out), results_markdown_path(out)
    if not parts:
        raise InputError("no parts given", field="parts")
    _check_outputs(parts, out, samples_file, markdown_file)
    first_path, first = Path(parts[0]), read_results(parts[0])
    _, n, every = _shard(first, first_path)
    versions = _versions(first, first_path)
    loaded = _read_parts(parts, first_path, first, n, every)
    ordered = _problems(loaded, every)
    codes = [data.get("code") for _, (_, data) in sorted(loaded.items())]
    code = codes[0] if all(c == codes[0] for c in codes) else codes  # the shards' code: one, or one per part
    return _write((out, samples_file, markdown_file), first, versions, ordered, code)


def _check_outputs(parts: Sequence[str | Path], out: Path, samples_file: Path, markdown_file: Path) -> None:
    """Refuse, before anything is read, outputs that are parts (or their per-problem files) or
    cannot be written."""
    check_outputs_not_inputs(out, (samples_file, markdown_file),
                             [q for p in map(Path, parts) for q in (p, store.samples_path(p))])
    for path in (out, samples_file, markdown_file):
        check_output_file(path)


def _read_parts(parts: Sequence[str | Path], first_path: Path, first: dict, n: int,
                every: list[str]) -> dict[int, tuple[Path, dict]]:
    """Every part by its shard number, each checked to come from the evaluation of the first
    part and to be a shard not given before; all N shards must be there."""
    loaded: dict[int, tuple[Path, dict]] = {}
    for path in map(Path, parts):
        data = read_results(path)
        k, size, keys = _shard(data, path)
        _versions(data, path)
        changed = store.differences(first["settings"], data["settings"], sides=(str(first_path), str(path)))
        if changed or size != n or keys != every:
            why = "; ".join(changed) if changed else (f"it is one of {size} parts, not {n}" if size != n
                                                      else "its problem list differs")
            raise InputError(f"comes from another evaluation than {first_path}: {why}", path=str(path))
        if k in loaded:
            raise InputError(f"is shard {k}/{n} again (also {loaded[k][0]})", path=str(path))
        loaded[k] = (path, data)
    missing = [f"{k}/{n}" for k in range(1, n + 1) if k not in loaded]
    if missing:
        raise InputError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing: give every part "
                         "of the evaluation", field="parts")
    return loaded


def _problems(loaded: dict[int, tuple[Path, dict]], every: list[str]) -> list[dict]:
    """The problem records of all parts in the whole evaluation's order, each problem of the
    evaluation found in exactly one part."""
    found: dict[str, tuple[dict, Path]] = {}
    for _, (path, data) in sorted(loaded.items()):
        for record in data["problems"]:
            key = record["key"]
            if key not in every:
                raise InputError(f"holds problem {key!r}, which is not in the evaluation", path=str(path))
            if key in found:
                raise InputError(f"holds problem {key!r} again (also {found[key][1]})", path=str(path))
            found[key] = (record, path)
    absent = [key for key in every if key not in found]
    if absent:
        raise InputError(f"{len(absent)} problems are in no part (first {absent[0]!r}): finish the shards that hold "
                         "them", field="parts")
    return [found[key][0] for key in every]


def _write(outputs: tuple[Path, Path, Path], first: dict, versions: dict, ordered: list[dict], code) -> str:
    """The merged results, table and per-problem file (``outputs``) a whole evaluation writes,
    all prepared before the first is written; returns the table."""
    out, samples_file, markdown_file = outputs
    settings = first["settings"]
    summary = summarise(ordered, settings["benchmarks"], seed=settings["seed"])
    results = {"format": FORMAT, "settings": settings, "model": first["model"], "versions": versions,
               "code": code, "notes": first.get("notes", []), "summary": summary, "problems": ordered}
    table = result_markdown(results)
    header = {"kind": "settings", "settings": settings, "hista_version": versions["hista"]}
    lines = [dumps_line(record) for record in [header, *ordered]]
    # every check has passed and every byte is ready: only now are the files written
    write_json_atomic(out, results)
    write_atomic(markdown_file, lambda fh: fh.write(table))
    write_atomic(samples_file, lambda fh: fh.writelines(lines))
    return table
