"""``hista eval compare``: runs side by side, with paired differences from the first.

Runs are comparable when their settings are equal but for the model (name, revision, weights):
the same benchmarks and problems (their fingerprints), temperature, k, token cap, system
prompt, seed and batch size. Other runs are refused, naming the fields, unless ``force``.
A later run's difference from the first is paired: per problem, the later run's score minus
the first's, over the problems both have; its interval resamples those differences (the
stratified bootstrap of :mod:`hista.evaluation.metrics`, a repeated question drawn as one),
which is much narrower than the two runs' own intervals when the runs agree on most problems.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from ..errors import InputError
from ..jsonio import check_output_file, write_atomic, write_json_atomic
from . import store
from .metrics import N_BOOT, bootstrap, problem_score
from .report import compare_markdown
from .run import check_outputs_not_inputs, read_results

#: Settings that may differ between compared runs: they say which model ran.
MODEL_FIELDS = ("model", "revision", "weights")


def _comparable(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k not in MODEL_FIELDS}


def _scores(path: str, results: dict, metric: str) -> dict[str, dict[str, float]]:
    """benchmark -> problem key -> score under ``metric`` (problems with fewer samples than
    pass@K needs are left out) of a results file that :func:`hista.evaluation.run.read_results`
    has checked."""
    out: dict[str, dict[str, float]] = {}
    need = int(metric[5:]) if metric != "avg" else 1
    for record in results["problems"]:  # each checked by read_results (store.check_problem)
        if len(record["samples"]) >= need:
            out.setdefault(record["benchmark"], {})[record["key"]] = problem_score(
                [s["reward"] for s in record["samples"]], metric)
    return out


def _intervals(scores: dict[str, dict[str, float]], questions: dict[str, str], categories: dict[str, str],
               seed: int, n_boot: int) -> dict:
    """Bootstrap intervals of the benchmarks present (benchmark -> problem key -> score), the
    problems that pose one question (``questions``: key -> text) drawn together; a category (and
    ALL) only when every benchmark of it (of all) is present."""
    present = {n: v for n, v in scores.items() if v}
    if not present:
        return {"benchmarks": {}, "categories": {}, "overall": None}
    clusters = {n: [questions[key] for key in v] for n, v in present.items()}
    result = bootstrap({n: list(v.values()) for n, v in present.items()}, {n: categories[n] for n in present},
                       n_boot=n_boot, seed=seed, clusters=clusters)
    complete = {c for c in set(categories.values()) if all(n in present for n in categories if categories[n] == c)}
    return {"benchmarks": result["benchmarks"],
            "categories": {c: v for c, v in result["categories"].items() if c in complete},
            "overall": result["overall"] if len(present) == len(categories) else None}


def _entry(metric: str, interval: Optional[dict]) -> dict:
    return {"avg": interval} if metric == "avg" else {"pass": {metric[5:]: interval}}


def compare(paths: Sequence[str], *, force: bool = False, metric: str = "avg", seed: int = 0,
            n_boot: int = N_BOOT) -> dict:
    """Compare the results files ``paths`` (module docstring) under ``metric``
    (``avg`` or ``pass@K``). Raises an InputError for fewer than two files, a file that is not a
    results file (any field that :func:`hista.evaluation.run.check_results` refuses, named), a
    bad metric, or (without ``force``) settings that differ from the first run's
    other than the model, naming the fields. Returns the runs (label, path, model, summary of
    the metric), the differences allowed by ``force``, and the table: per benchmark, category
    and ALL, each run's interval and each later run's paired difference from the first."""
    if len(paths) < 2:
        raise InputError("give at least two results files to compare", field="results")
    if metric != "avg" and not re.fullmatch(r"pass@[1-9][0-9]*", metric):
        raise InputError(f"unknown metric {metric!r}: use avg or pass@K (K >= 1)", field="metric")
    runs = [read_results(p) for p in paths]
    differences = _differences(paths, runs, force)
    categories = {b["name"]: b["category"] for b in runs[0]["settings"]["benchmarks"]}
    scores = [_scores(p, r, metric) for p, r in zip(paths, runs)]
    questions = [{record["key"]: record["problem"] for record in run["problems"]} for run in runs]
    base = scores[0]
    own = [_intervals({n: s.get(n, {}) for n in categories}, q, categories, seed, n_boot)
           for s, q in zip(scores, questions)]
    paired = [_intervals({n: {key: s[n][key] - base[n][key] for key in base.get(n, {}) if key in s.get(n, {})}
                          for n in categories}, questions[0], categories, seed, n_boot) for s in scores[1:]]
    return {"metric": metric, "seed": seed, "runs": _runs(paths, runs, own, metric), "differences": differences,
            "table": _table(categories, base, own, paired)}


def _differences(paths: Sequence[str], runs: list[dict], force: bool) -> list[str]:
    """Where each later run's settings differ from the first's other than the model, each named
    with its file; an InputError listing them unless ``force``."""
    first = _comparable(runs[0]["settings"])
    differences = []
    for path, run in zip(paths[1:], runs[1:]):
        differences += [f"{path}: {d}" for d in store.differences(first, _comparable(run["settings"]),
                                                                    sides=("in the first run", "here"))]
    if differences and not force:
        raise InputError(f"settings differ from the first run's ({paths[0]}), so the runs are not comparable: "
                         + "; ".join(differences) + ". Pass --force to compare them anyway",
                         path=str(paths[1]), field=differences[0].split(": ", 1)[1].split(" (")[0])
    return differences


def _table(categories: dict[str, str], base: dict, own: list[dict], paired: list[dict]) -> dict:
    """The rows of the comparison, per benchmark, category and ALL: each run's interval and each
    later run's paired difference from the first."""
    table: dict = {"benchmarks": {}, "categories": {}, "overall": {}}
    for n, c in categories.items():
        table["benchmarks"][n] = {"category": c, "problems": len(base.get(n, {})),
                                  "values": [o["benchmarks"].get(n) for o in own],
                                  "differences": [p["benchmarks"].get(n) for p in paired]}
    for c in dict.fromkeys(categories.values()):
        table["categories"][c] = {"category": c, "values": [o["categories"].get(c) for o in own],
                                  "differences": [p["categories"].get(c) for p in paired]}
    table["overall"]["ALL"] = {"values": [o["overall"] for o in own], "differences": [p["overall"] for p in paired]}
    return table


def _runs(paths: Sequence[str], runs: list[dict], own: list[dict], metric: str) -> list[dict]:
    """Each run compared: its label (the model's name, or the path when names repeat), file,
    model and its own intervals under ``metric``."""
    names = [r["model"]["name"] for r in runs]
    labels = names if len(set(names)) == len(names) else [str(p) for p in paths]
    out_runs = []
    for label, path, run, o in zip(labels, paths, runs, own):
        summary = {"benchmarks": {n: _entry(metric, v) for n, v in o["benchmarks"].items()},
                   "categories": {c: _entry(metric, v) for c, v in o["categories"].items()},
                   "overall": _entry(metric, o["overall"])}
        out_runs.append({"label": label, "path": str(Path(path)), "model": run["model"]["name"],
                         "revision": run["model"]["revision"], "run": run["model"].get("run"), "summary": summary})
    return out_runs


def compare_to_files(paths: Sequence[str], out: Optional[str | Path] = None, *, force: bool = False,
                     metric: str = "avg", seed: int = 0) -> tuple[dict, str, list[Path]]:
    """``hista eval compare``: :func:`compare` the results files ``paths`` and render
    the markdown table; with ``out`` (a ``.md`` name) write the table there and the numbers to
    the ``.json`` beside it. Both outputs are checked before anything is read (neither may be
    one of ``paths``) and written atomically. Returns the comparison, the table and
    the paths written."""
    written: list[Path] = []
    if out is not None:
        out = Path(out)
        if out.suffix == ".json":
            raise InputError("give the markdown file a .md name: the numbers go to the .json file beside it",
                             path=str(out))
        written = [out, out.with_suffix(".json")]
        check_outputs_not_inputs(out, written[1:], paths)
        check_output_file(written[0], "markdown")
        check_output_file(written[1], "json")
    result = compare(paths, force=force, metric=metric, seed=seed)
    text = compare_markdown(result)
    if written:
        write_atomic(written[0], lambda fh: fh.write(text), kind="markdown")
        write_json_atomic(written[1], result)
    return result, text, written
