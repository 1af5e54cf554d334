"""Sharded SVEB builds: N machines each build a disjoint part of one benchmark, and
``merge`` joins the parts into the file a single build would have written.

A build processes its problem list in fixed chunks whose seeds depend only on the chunk's first
problem (:func:`hista.sveb.build.build`), so a shard is a set of whole chunks
(:func:`hista.sharding.chunks_of`: shard K of N takes chunks K-1, K-1+N, ...).
Each shard writes its cases to its own file and, beside it, a manifest ``OUT.shard.json`` with
the shard's number, the build settings, the number of problems and the global position of each
of its problems. ``merge`` checks the manifests against each other and the parts against their
manifests, and writes the records in the single build's order: by problem, then by key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from ..errors import InputError
from ..jsonio import check_not_inputs, check_output_file, loads, write_atomic, write_json_atomic
from . import cases

FORMAT = "hista-sveb-shard/1"


def manifest_path(out: str | Path) -> Path:
    """Where the manifest of the shard written to ``out`` lies: ``OUT.shard.json``."""
    out = Path(out)
    return out.with_name(out.name + ".shard.json")


def manifest(shard: tuple[int, int], settings: dict, problems: int, order: Sequence[tuple[int, str]]) -> dict:
    """The manifest of one shard: its (K, N), the build settings, the number of problems of the
    whole build and (global position, problem id) of each problem the shard builds."""
    return {"format": FORMAT, "shard": list(shard), "settings": settings, "problems": problems,
            "order": [list(item) for item in order]}


def write_manifest(out: str | Path, data: dict) -> None:
    """Write (or, resuming, check) the manifest beside the shard's case file ``out``: a shard
    file is only ever resumed as the same shard of the same build."""
    path = manifest_path(out)
    if path.exists():
        earlier = read_manifest(path)
        if earlier != data:
            changed = sorted(k for k in data if earlier.get(k) != data[k])
            raise InputError(f"belongs to another shard or build ({', '.join(changed)} differ): use another "
                             "--out, or the same --shard and settings", path=str(path))
        return
    write_json_atomic(path, data)


def read_manifest(path: Path) -> dict:
    """A manifest, checked for its format; an InputError names the file and the field."""
    try:
        data = loads(path.read_text(encoding="utf-8"), path=str(path))
    except FileNotFoundError:
        raise InputError("is missing: build the part with --shard K/N, which writes it beside the cases",
                         path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot be read ({exc})", path=str(path)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"is not a shard manifest (format {FORMAT})", path=str(path))
    shard = data.get("shard")
    if not (isinstance(shard, list) and len(shard) == 2 and all(type(x) is int for x in shard)
            and 1 <= shard[0] <= shard[1]):
        raise InputError(f"expected [K, N] with 1 <= K <= N, got {shard!r}", path=str(path), field="shard")
    if type(data.get("problems")) is not int or not isinstance(data.get("settings"), dict):
        raise InputError("needs settings (an object) and problems (an integer)", path=str(path))
    order = data.get("order")
    if not isinstance(order, list) or not all(isinstance(o, list) and len(o) == 2 and type(o[0]) is int
                                              and isinstance(o[1], str) for o in order):
        raise InputError("expected a list of [position, problem id] pairs", path=str(path), field="order")
    return data


def merge(parts: Sequence[str | Path], out: str | Path) -> dict:
    """Join the case files of every shard of one build into ``out``, in the order of a
    single build, so that the result has the bytes a single build with the same settings and
    seed writes on the same engine. Refuses, naming the file, parts of different builds
    (settings, seed, model, number of problems or N differ), a shard given twice or missing,
    a part with a problem of another shard, and a part that lacks records of its problems (an
    unfinished shard: resume it). Returns counts of cases and skips written."""
    check_not_inputs([out], [p for part in parts for p in (part, manifest_path(Path(part)))])
    out = check_output_file(out, "jsonl")
    loaded, first = _load_parts(parts)
    n = _shard_count(loaded, first)
    position, records = _placed_records(loaded, n, first[1]["settings"].get("states_per_problem", 1))
    total = first[1]["problems"]
    if sorted(position.values()) != list(range(total)):
        raise InputError(f"the parts' manifests place {len(position)} problems, not each of the build's {total} "
                         "once", field="parts")
    records.sort(key=lambda r: (position[r["key"].split("#")[0]], r["key"]))
    write_atomic(out, lambda f: f.writelines(cases.dumps(r) for r in records), kind="jsonl")
    counted = [r["kind"] for r in records]
    return {"cases": counted.count("case"), "skipped": counted.count("skip"), "parts": n}


def _load_parts(parts: Sequence[str | Path]) -> tuple[dict[int, tuple[Path, dict, list[dict]]],
                                                      Optional[tuple[Path, dict]]]:
    """Each part's (path, manifest, records) by shard, and the first part, which the others must match."""
    loaded: dict[int, tuple[Path, dict, list[dict]]] = {}
    first: Optional[tuple[Path, dict]] = None
    for part in map(Path, parts):
        data = read_manifest(manifest_path(part))
        k, n = data["shard"]
        if first is None:
            first = (part, data)
        else:
            _check_same_build(part, data, first)
        if k in loaded:
            raise InputError(f"is shard {k}/{n} again (also {loaded[k][0]})", path=str(part))
        loaded[k] = (part, data, cases.read(part))
    return loaded, first


def _check_same_build(part: Path, data: dict, first: tuple[Path, dict]) -> None:
    """Refuse a part of another build than the first part's (settings, number of problems or N differ)."""
    reference = first[1]
    for name in ("settings", "problems"):
        if data[name] != reference[name]:
            differ = name if name == "problems" else ", ".join(sorted(
                key for key in data[name].keys() | reference[name].keys()
                if data[name].get(key) != reference[name].get(key)))
            raise InputError(f"comes from another build than {first[0]} ({differ} differ)", path=str(part))
    k, n = data["shard"]
    if n != reference["shard"][1]:
        raise InputError(f"is shard {k}/{n} but {first[0]} is one of {reference['shard'][1]}", path=str(part))


def _shard_count(loaded: dict[int, tuple], first: Optional[tuple[Path, dict]]) -> int:
    """N, the build's number of shards, once every shard from 1 to N is known to be given."""
    if first is None:
        raise InputError("no parts given", field="parts")
    n = first[1]["shard"][1]
    missing = [k for k in range(1, n + 1) if k not in loaded]
    if missing:
        raise InputError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{k}/{n}' for k in missing)} "
                         "missing: give every part of the build", field="parts")
    return n


def _placed_records(loaded: dict[int, tuple[Path, dict, list[dict]]], n: int,
                    states: int) -> tuple[dict[str, int], list[dict]]:
    """Every problem's global position and all parts' records in shard order, each part checked."""
    position: dict[str, int] = {}
    records: list[dict] = []
    for k, (part, data, rows) in sorted(loaded.items()):
        position.update(_own_problems(part, (k, n), data, rows, states))
        records += rows
    return position, records


def _own_problems(part: Path, shard: tuple[int, int], data: dict, rows: list[dict], states: int) -> dict[str, int]:
    """A part's problems and positions, once its records are its own, of its settings, and complete."""
    k, n = shard
    own = {problem: index for index, problem in data["order"]}
    found: dict[str, set[str]] = {}
    for line, record in enumerate(rows, start=1):
        problem = record["key"].split("#")[0]
        if problem not in own:
            raise InputError(f"holds a record of problem {problem!r}, which is not in shard {k}/{n}",
                             path=str(part), line=line)
        if record["settings"] != data["settings"]:
            raise InputError("was built with other settings than its manifest", path=str(part), line=line)
        found.setdefault(problem, set()).add(record["key"])
    unfinished = [p for p in own if p not in found or (p not in found[p] and len(found[p]) < states)]
    if unfinished:
        raise InputError(f"shard {k}/{n} is unfinished: {len(unfinished)} of its {len(own)} problems lack records "
                         f"(first {unfinished[0]!r}); resume it with its build command", path=str(part))
    return own
