"""``hista eval``: evaluate a model on benchmark suites, resumably.

The problems left to do of all benchmarks sampled alike (temperature, samples per problem) go
to the rollout engine in one call, ``batch_size`` samples decoding at a time, problems mixed
(continuous batching: a finished sample's place goes to the next one at once). A problem's
samples are seeded by the evaluation seed, the benchmark and the problem's id alone, so they do
not depend on the batch or on what ran before: a resumed or sharded evaluation samples what an
uninterrupted one does, and evaluates only the problems the per-problem file lacks. Each
problem is verified with the verifiers that give training rewards and appended the
moment its samples are done; at the end ``results.json`` (settings, model, versions, every
problem's samples with verdict and reason, the summary) and ``results.md`` are written
atomically. Sharding still cuts each benchmark's problems into fixed chunks of
``batch_size // n`` problems (n samples per problem), shard K taking every N-th.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from tqdm.auto import tqdm

from .. import __version__, provenance
from ..errors import InputError
from ..jsonio import check_not_inputs, check_output_file, cut_unterminated, loads, write_atomic, write_json_atomic
from ..models import EMBEDDED, LoadedModel
from ..rewards import verify_with_reason
from ..rollout import SamplingConfig
from ..rollout.engine import check_prompts, eos_ids
from ..rollout.engines import check_engine, load_model, make_engine
from ..schema import Where, is_int, require, short, text
from ..sharding import chunks_of, derive_seed
from . import checkpoint, store, suites
from .report import result_markdown
from .summary import empty_summary, summarise

#: The ``format`` of a results file.
FORMAT = "hista-eval-results/1"


@dataclasses.dataclass
class EvalConfig:
    """Settings of ``hista eval``. ``suites``: preset names and task specs;
    ``temperature`` and ``k``: when given, every benchmark's (else each benchmark's own: a plain
    spec is greedy, k = 1); ``max_new_tokens``: None takes the suites' own cap; ``limit``: at
    most this many problems per benchmark (the first ones); ``seed`` seeds the sampling;
    ``batch_size``: sequences per generation batch; ``engine`` and ``tensor_parallel_size``: the
    rollout engine. A bad value raises an InputError naming the field (the CLI
    option's name)."""

    model: str = EMBEDDED
    suites: Sequence[str] = ("builtin",)
    k: Optional[int] = None
    temperature: Optional[float] = None
    max_new_tokens: Optional[int] = None
    limit: Optional[int] = None
    seed: int = 0
    batch_size: int = 64
    engine: str = "hf"
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.suites, str):
            self.suites = [s for s in self.suites.split(",")]
        self.suites = list(self.suites)
        least = {"k": 1, "max_new_tokens": 1, "limit": 1, "seed": 0, "batch_size": 1}
        for name, low in least.items():
            value = getattr(self, name)
            if value is None and name in ("k", "max_new_tokens", "limit"):
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise InputError(f"must be an integer >= {low}, got {value!r}", field=name)
        t = self.temperature
        if t is not None and (isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t < 0):
            raise InputError(f"must be a finite number >= 0 (0 = greedy), got {t!r}", field="temperature")
        check_engine(self.engine, self.tensor_parallel_size)


def results_markdown_path(out: Path) -> Path:
    """The markdown table written beside the results file ``out``."""
    return out.with_suffix(".md") if out.suffix == ".json" else out.with_name(out.name + ".md")


def output_paths(out: str | Path) -> tuple[Path, Path, Path]:
    """The files an evaluation into ``out`` writes: the results file, its per-problem
    samples file (:func:`hista.evaluation.store.samples_path`) and its markdown table."""
    out = Path(out)
    return out, store.samples_path(out), results_markdown_path(out)


def check_suites(config: EvalConfig, *, load: bool = False) -> None:
    """Resolve the suites of ``config`` (an InputError names one that is not a preset
    or task spec) and, with ``load``, load every benchmark's problems now, so that a run that
    will evaluate them fails before it writes anything (SPEC §9 ``eval:``, §11)."""
    benchmarks = suites.resolve(config.suites, temperature=config.temperature, k=config.k)[0]
    if load:
        for benchmark in benchmarks:
            suites.load_problems(benchmark, config.limit)


def problem_key(benchmark: str, problem: dict) -> str:
    """The key of a problem in the per-problem file: ``BENCHMARK/ID``."""
    return f"{benchmark}/{problem['id']}"


def read_results(path: str | Path) -> dict:
    """A results file written by :func:`evaluate` or :func:`hista.evaluation.merge.merge`, checked
    by :func:`check_results`: an InputError naming the file and field
    when it is not one (not JSON, another format, no settings, summary or problems, a bad
    field in them)."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the results file ({getattr(exc, 'strerror', None) or exc})",
                         path=str(path)) from None
    return check_results(loads(raw, path=str(path)), path)


def _benchmark(entry: object, k: int, where: Where) -> dict:
    """One entry of a results file's ``settings.benchmarks``: name, category, temperature and
    samples, which the summary and the comparison use."""
    field = f"settings.benchmarks[{k}]"
    if not isinstance(entry, dict):
        where.fail(f"expected an object, got {short(entry)}", field)
    for name in ("name", "category"):
        text(require(entry, name, str, where, field + "."), f"{field}.{name}", where)
    t = require(entry, "temperature", (int, float), where, field + ".")
    if not (math.isfinite(t) and t >= 0):
        where.fail(f"expected a number >= 0, got {short(t)}", field + ".temperature")
    if not is_int(require(entry, "samples", int, where, field + ".")) or entry["samples"] < 1:
        where.fail(f"expected an integer >= 1, got {short(entry['samples'])}", field + ".samples")
    return entry


def check_results(data: object, path: str | Path) -> dict:
    """``data`` when it is a hista eval results file, else an InputError naming
    ``path`` and the field: its ``format``; ``settings`` with ``suites`` (strings), ``seed``
    (an integer >= 0), ``max_new_tokens`` (>= 1) and ``benchmarks`` (a non-empty list, each
    with a unique name, a category, a temperature and a sample count); ``model`` with ``name``
    and ``revision`` (a string or null) and ``run`` (null or the run it came from);
    ``versions`` and ``notes`` when present (strings); the ``summary`` an object; and every
    problem record through the one check of :func:`hista.evaluation.store.check_problem`,
    each of a benchmark of the settings, with that benchmark's category, and no key twice.
    ``hista eval compare``, ``hista eval merge`` and a resumed ``hista eval`` read results
    files through here."""
    where = Where(path)
    _check_layout(data, where)
    categories = _check_settings(data["settings"], where)
    _check_model(data["model"], where)
    for name in ("versions", "notes"):
        _check_strings(data, name, where)
    _check_problems(data["problems"], categories, where)
    return data


def _check_layout(data: object, where: Where) -> None:
    """A results file's format and its top-level objects and lists, checked first so that the
    other checks can read them."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        where.fail(f"not a hista eval results file (expected \"format\": \"{FORMAT}\")", "format")
    for name, kind in (("settings", dict), ("summary", dict), ("problems", list), ("model", dict)):
        if not isinstance(data.get(name), kind):
            where.fail(f"missing, or not {'an object' if kind is dict else 'a list'}", name)


def _check_settings(settings: dict, where: Where) -> dict[str, str]:
    """The checked ``settings`` of a results file: the category of each benchmark by its name,
    which every problem record must match."""
    suites_ = require(settings, "suites", list, where, "settings.")
    for k, suite in enumerate(suites_):
        if not isinstance(suite, str):
            where.fail(f"expected a string, got {short(suite)}", f"settings.suites[{k}]")
    for name, low in (("seed", 0), ("max_new_tokens", 1)):
        if not is_int(require(settings, name, int, where, "settings.")) or settings[name] < low:
            where.fail(f"expected an integer >= {low}, got {short(settings[name])}", f"settings.{name}")
    benchmarks = require(settings, "benchmarks", list, where, "settings.")
    if not benchmarks:
        where.fail("must name at least one benchmark", "settings.benchmarks")
    categories: dict[str, str] = {}
    for k, entry in enumerate(benchmarks):
        b = _benchmark(entry, k, where)
        if b["name"] in categories:
            where.fail(f"benchmark {short(b['name'])} is named twice", f"settings.benchmarks[{k}].name")
        categories[b["name"]] = b["category"]
    return categories


def _check_model(model: dict, where: Where) -> None:
    """A results file's ``model``: its name, revision and the run it came from, if any."""
    text(require(model, "name", str, where, "model."), "model.name", where)
    require(model, "revision", (str, type(None)), where, "model.", what="a string or null")
    run = model.get("run")
    if run is not None:
        if not isinstance(run, dict):
            where.fail(f"expected null or an object, got {short(run)}", "model.run")
        if run:
            for name in ("output_dir", "checkpoint"):
                require(run, name, str, where, "model.run.")


def _check_strings(data: dict, name: str, where: Where) -> None:
    """A results file's ``versions`` (an object) or ``notes`` (a list), when present: strings only."""
    value = data.get(name)
    if value is None and name not in data:
        return
    kind_ = dict if name == "versions" else list
    if not isinstance(value, kind_):
        where.fail(f"expected {'an object' if kind_ is dict else 'a list'}, got {short(value)}", name)
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if not isinstance(item, str):
            where.fail(f"expected a string, got {short(item)}",
                       f"{name}.{key}" if isinstance(value, dict) else f"{name}[{key}]")


def _check_problems(problems: list, categories: dict[str, str], where: Where) -> None:
    """A results file's problem records: each well-formed, of a benchmark of the settings with
    its category, and no key twice."""
    seen: dict[str, int] = {}
    for k, record in enumerate(problems):
        prefix = f"problems[{k}]."
        store.check_problem(record, where, prefix)
        if record["benchmark"] not in categories:
            where.fail(f"benchmark {short(record['benchmark'])} is not in settings.benchmarks "
                       f"({', '.join(categories)})", prefix + "benchmark")
        if record["category"] != categories[record["benchmark"]]:
            where.fail(f"expected {short(categories[record['benchmark']])}, the category of benchmark "
                       f"{short(record['benchmark'])} in settings.benchmarks, got {short(record['category'])}",
                       prefix + "category")
        if record["key"] in seen:
            where.fail(f"key {short(record['key'])} is already used by problems[{seen[record['key']]}]",
                       prefix + "key")
        seen[record["key"]] = k


def check_outputs_not_inputs(out: Path, siblings: Sequence[Path], inputs: Sequence[str | Path]) -> None:
    """Refuse, before any work, an output that is one of the command's ``inputs`` (SPEC §10,
    §11 output files): ``out`` or a file written beside it (``siblings``: the table, the
    per-problem file), after following symlinks (:func:`hista.jsonio.check_not_inputs`). The
    InputError names the output, the input and, for a sibling, the ``out`` it is written beside."""
    check_not_inputs([out], inputs)
    for sibling in siblings:
        try:
            check_not_inputs([sibling], inputs)
        except InputError as exc:
            raise InputError(f"{exc.message} (it is written beside {out})", path=exc.path) from None


def task_files(specs: Sequence[str]) -> list[Path]:
    """The local files that the ``jsonl:`` task specs among ``specs`` (an evaluation's suites;
    presets name none) read: inputs that no output of the evaluation may overwrite."""
    return [Path(os.path.expanduser(spec.strip()[len("jsonl:"):])) for spec in specs
            if isinstance(spec, str) and spec.strip().startswith("jsonl:") and spec.strip()[len("jsonl:"):]]


def _settings(config: EvalConfig, source: checkpoint.ModelSource, benchmarks: list, problems: dict,
              categories: dict, max_new_tokens: int) -> dict:
    """What a resumed evaluation must match and a comparison must share."""
    model = str(Path(source.load_as)) if Path(source.load_as).exists() else source.load_as
    return {"model": model, "revision": None, "engine": None, "weights": checkpoint.weights_stamp(source.load_as),
            "system_prompt": source.system_prompt,
            "suites": [s.strip() for s in config.suites],
            "benchmarks": [{**b.to_dict(), "category": categories[b.name], "n_problems": len(problems[b.name]),
                            "problems_sha256": suites.fingerprint(problems[b.name])} for b in benchmarks],
            "limit": config.limit, "max_new_tokens": max_new_tokens, "top_p": 1.0, "batch_size": config.batch_size,
            "seed": config.seed}


def _check_earlier(out: Path, samples: Path, settings: dict) -> tuple[Optional[dict], list[dict]]:
    """What an earlier evaluation into ``out`` left, refused when its settings differ (the
    model revision and the engine's identity are checked once the model is loaded): the
    per-problem file's header and records. A results file at ``out`` that is not a hista eval
    results file is refused too."""
    late = ("revision", "engine")
    unloaded = {k: v for k, v in settings.items() if k not in late}
    if out.exists():
        earlier = read_results(out)
        store.check_settings({k: v for k, v in earlier["settings"].items() if k not in late}, unloaded,
                             Where(out), f"{out} holds an evaluation")
    header, records = store.read(samples)
    if header is not None:
        store.check_settings({k: v for k, v in header["settings"].items() if k not in late}, unloaded,
                             Where(samples, 1), "was written by an evaluation")
    return header, records


def _record(benchmark: str, category: str, problem: dict, rollouts, eos: set[int]) -> dict:
    """One finished problem: its samples verified."""
    samples = []
    for r in rollouts:
        reward, reason = verify_with_reason(problem["verifier"], r.completion_text, problem["answer"])
        samples.append({"text": r.completion_text, "tokens": len(r.completion_ids), "reward": reward,
                        "reason": reason, "truncated": not r.completion_ids or r.completion_ids[-1] not in eos})
    return {"kind": "problem", "key": problem_key(benchmark, problem), "benchmark": benchmark, "category": category,
            "id": problem["id"], "problem": problem["problem"], "answer": problem["answer"],
            "verifier": problem["verifier"], "samples": samples}


def _part_name(part) -> str:
    return f"shard {part[0]}/{part[1]}" if part else "a whole evaluation"


def _versions() -> dict:
    import torch
    import transformers

    return {"hista": __version__, "torch": torch.__version__, "transformers": transformers.__version__}


def evaluate(config: EvalConfig, out: str | Path, *, lm: Optional[LoadedModel] = None, device: Optional[str] = None,
             progress: bool = True, log: Callable[[str], None] = print,
             source: Optional[checkpoint.ModelSource] = None, shard: Optional[tuple[int, int]] = None) -> dict:
    """Evaluate ``config.model`` on ``config.suites`` into ``out`` (module docstring),
    resuming an earlier evaluation with the same settings there. Everything is checked before
    the model loads: the suites and their problems (an unreachable hub fails in seconds), the
    output files (none may be a ``jsonl:`` task file the suites read), and the settings of an
    earlier evaluation in ``out``, which must equal these (an InputError names the fields that
    differ); once the model is loaded, that every prompt left to do fits its context with the
    completion cap (:func:`hista.rollout.engine.check_prompts`: an InputError names the problem
    and its token count); a crash's unterminated last line of the per-problem file is cut off
    only once every check has passed. ``lm`` replaces loading ``config.model`` (it
    must be that model). ``source`` replaces what ``config.model`` names, for an ``lm`` held in
    memory (the policy during training): the name recorded and the system prompt. Notes (greedy
    with k > 1) go to ``log``. Returns the output paths, the summary, the timing of this call and
    how many problems it evaluated and found done. ``shard`` (K, N) evaluates only the chunks of
    shard K of N (every N-th chunk from K-1, over all benchmarks in order): its results hold
    those problems and, under ``"shard"``, the part and every problem key of the whole
    evaluation, for :func:`hista.evaluation.merge.merge`; a shard with no chunks (fewer chunks
    than shards) writes an empty part (:func:`hista.evaluation.summary.empty_summary`)."""
    job = _prepare(config, out, log, source, shard)
    lm = lm or load_model(config.engine, job.source.load_as, device=device)
    sampler = _open_engine(job, lm)
    done = _resume(job, lm)
    eos = set(eos_ids(lm))
    start = time.perf_counter()
    timing = _generate(job, sampler, eos, done, progress)
    return _write(job, lm, done, timing, start)


@dataclasses.dataclass
class _Job:
    """What one evaluation works on, as the checks before the model loads found it: its output
    files, benchmarks and problems, settings, what an earlier evaluation left, and its plan."""

    config: EvalConfig
    out: Path
    samples_file: Path
    markdown_file: Path
    benchmarks: list
    notes: list
    max_new_tokens: int
    problems: dict
    categories: dict
    source: checkpoint.ModelSource
    settings: dict
    header: Optional[dict]
    records: list[dict]
    part: Optional[list]
    #: the fixed chunks to evaluate, in order: (benchmark, problems of one generation batch)
    plan: list
    #: every problem key of the whole evaluation, in order
    every: list[str]
    #: the problem keys of the plan (this shard's)
    keys: set[str]


def _prepare(config: EvalConfig, out: str | Path, log: Callable[[str], None],
             source: Optional[checkpoint.ModelSource], shard: Optional[tuple[int, int]]) -> _Job:
    """Every check of an evaluation before its model loads, in order (outputs, suites, problems,
    an earlier evaluation's settings and shard), and what they found."""
    out, samples_file, markdown_file = output_paths(out)
    check_outputs_not_inputs(out, (samples_file, markdown_file), task_files(config.suites))
    for path in (out, samples_file, markdown_file):
        check_output_file(path)
    benchmarks, cap, notes = suites.resolve(config.suites, temperature=config.temperature, k=config.k)
    for note in notes:
        log(note)
    max_new_tokens = config.max_new_tokens or cap
    problems = {b.name: suites.load_problems(b, config.limit) for b in benchmarks}
    categories = {b.name: suites.category_of(b, problems[b.name]) for b in benchmarks}
    source = source or checkpoint.resolve(config.model)
    settings = _settings(config, source, benchmarks, problems, categories, max_new_tokens)
    header, records = _check_earlier(out, samples_file, settings)
    part = list(shard) if shard is not None else None
    if header is not None and header.get("shard") != part:
        raise InputError(f"was written by {_part_name(header.get('shard'))}, not {_part_name(part)}: use another "
                         "--out or the same --shard", path=str(samples_file), line=1)
    plan = _plan(benchmarks, problems, config.batch_size, shard)
    return _Job(config, out, samples_file, markdown_file, benchmarks, notes, max_new_tokens, problems, categories,
                source, settings, header, records, part, plan,
                every=[problem_key(b.name, p) for b in benchmarks for p in problems[b.name]],
                keys={problem_key(b.name, p) for b, chunk in plan for p in chunk})


def _plan(benchmarks: list, problems: dict, batch_size: int, shard: Optional[tuple[int, int]]) -> list:
    """The fixed chunks of every benchmark, in order, (benchmark, problems of one generation
    batch); with ``shard``, those of that shard only."""
    plan = [(b, problems[b.name][first:first + size]) for b in benchmarks
            for size in [max(1, batch_size // b.samples)] for first in range(0, len(problems[b.name]), size)]
    if shard is not None:
        plan = [plan[c] for c in chunks_of(len(plan), shard)]
    return plan


def _open_engine(job: _Job, lm: LoadedModel):
    """The rollout engine over ``lm``, whose revision and identity complete the settings."""
    config = job.config
    sampler = make_engine(config.engine, lm, SamplingConfig(top_p=1.0, batch_size=config.batch_size,
                                                            system_prompt=job.source.system_prompt),
                          tensor_parallel_size=config.tensor_parallel_size)
    job.settings["revision"], job.settings["engine"] = lm.revision, sampler.identity()
    return sampler


def _resume(job: _Job, lm: LoadedModel) -> dict[str, dict]:
    """The problems an earlier evaluation finished, by key, after the checks that need the model
    (the complete settings, the prompts left to do); only then is the per-problem file repaired
    or begun."""
    if job.header is not None:
        store.check_settings(job.header["settings"], job.settings, Where(job.samples_file, 1),
                             "was written by an evaluation")
    done = {}
    for r in job.records:
        if r["key"] not in job.keys:
            raise InputError(f"problem {r['key']!r} is not among this evaluation's problems",
                             path=str(job.samples_file), field="key")
        done[r["key"]] = r
    check_prompts(lm, job.max_new_tokens, [(problem_key(b.name, p), p["problem"]) for b, chunk in job.plan
                                           for p in chunk if problem_key(b.name, p) not in done],
                  job.source.system_prompt)
    # every check has passed: only now is a crash's unterminated last line cut off the file
    cut_unterminated(job.samples_file)
    if job.header is None:
        store.append(job.samples_file, [{"kind": "settings", "settings": job.settings, "hista_version": __version__,
                                         **({"shard": job.part} if job.part else {})}])
    return done


def _generate(job: _Job, sampler, eos: set[int], done: dict[str, dict], progress: bool) -> dict:
    """Sample and verify every problem left to do, each recorded as it finishes; returns the
    timing of the work. The problems of every benchmark sampled alike (temperature, samples) go
    in one call that streams each problem back as its samples finish (one long tail instead of
    one each)."""
    timing = {"generate_s": 0.0, "verify_s": 0.0, "write_s": 0.0, "problems": 0, "samples": 0, "tokens": 0}
    bar = tqdm(total=len(job.keys), initial=len(done), desc="eval", unit="problem", disable=not progress)
    alike: dict[tuple, list] = {}
    for b in job.benchmarks:
        todo = [(b, p) for plan_b, chunk in job.plan if plan_b is b for p in chunk
                if problem_key(b.name, p) not in done]
        alike.setdefault((b.temperature, b.samples), []).extend(todo)
    for (temperature, samples), todo in alike.items():
        if not todo:
            continue
        engine = sampler.with_config(SamplingConfig(
            temperature=temperature, top_p=1.0, max_new_tokens=job.max_new_tokens, batch_size=job.config.batch_size,
            system_prompt=job.source.system_prompt))
        bar.set_postfix(benchmarks=",".join(dict.fromkeys(b.name for b, _ in todo)))
        _sample(job, engine, todo, samples, eos, done, timing, bar)
    bar.close()
    return timing


def _sample(job: _Job, engine, todo: list, samples: int, eos: set[int], done: dict[str, dict], timing: dict,
            bar) -> None:
    """One engine call for the problems ``todo`` sampled alike: each problem verified and
    appended to the per-problem file as its samples finish, its time kept apart from the
    generation's."""
    spent = 0.0  # in on_group, while the engine waits

    def on_group(i: int, rollouts) -> None:
        nonlocal spent
        t = time.perf_counter()
        b, problem = todo[i]
        record = _record(b.name, job.categories[b.name], problem, rollouts, eos)
        timing["verify_s"] += time.perf_counter() - t
        w = time.perf_counter()
        store.append(job.samples_file, [record])
        timing["write_s"] += time.perf_counter() - w
        done[record["key"]] = record
        timing["problems"] += 1
        timing["samples"] += len(record["samples"])
        timing["tokens"] += sum(sample["tokens"] for sample in record["samples"])
        bar.update(1)
        spent += time.perf_counter() - t

    t = time.perf_counter()
    engine.generate([p["problem"] for _, p in todo], samples, on_group=on_group,
                    prompt_seeds=[derive_seed(job.config.seed, b.name, p["id"]) for b, p in todo])
    timing["generate_s"] += time.perf_counter() - t - spent


def _write(job: _Job, lm: LoadedModel, done: dict[str, dict], timing: dict, start: float) -> dict:
    """The summary, the results file and the table of a finished evaluation, and what
    :func:`evaluate` returns."""
    t = time.perf_counter()
    ordered = [done[key] for key in job.every if key in job.keys]
    # an empty shard (fewer chunks than shards) writes an empty part, which merges
    summary = summarise(ordered, job.settings["benchmarks"], seed=job.config.seed) if ordered else empty_summary()
    timing["summary_s"] = time.perf_counter() - t
    settings, part = job.settings, job.part
    results = {"format": FORMAT, "settings": settings,
               "model": {"name": settings["model"], "revision": lm.revision,
                         "device": str(lm.device) if lm.model is not None else "cuda",
                         "run": job.source.run},
               "versions": _versions(), "code": provenance.code(), "notes": job.notes, "summary": summary,
               "problems": ordered,
               **({"shard": {"part": part, "keys": job.every}} if part else {})}
    t = time.perf_counter()
    write_json_atomic(job.out, {**results, "timing": {**timing, "wall_s": time.perf_counter() - start}})
    table = result_markdown(results)
    write_atomic(job.markdown_file, lambda fh: fh.write(table))
    timing["write_s"] += time.perf_counter() - t
    timing["wall_s"] = time.perf_counter() - start
    return {"results": str(job.out), "samples": str(job.samples_file), "markdown": str(job.markdown_file),
            "summary": summary, "timing": timing, "evaluated": timing["problems"], "found": len(job.records),
            "table": table}
