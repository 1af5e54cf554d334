"""Difficulty-filtered training pools (paper Appendix G.1; docs/training.md
"Difficulty-filtered pools").

A recipe's ``pool_filter`` keeps the problems whose accuracy under the base policy (the mean
reward of ``samples`` samples, as ``hista tasks filter`` measures it) lies in the closed
``band``; the default ``[0.15, 0.75]`` is, with 20 samples, the paper's 0.1 < acc < 0.8. The
measurement is written once into ``OUTPUT_DIR/pool/`` and reused:

* ``settings.json``: everything the pool depends on (model, tasks, problems, split, seed,
  system prompt, band, samples, sampling settings);
* ``accuracy.jsonl``: one row per problem measured (``task``, ``id``, ``accuracy``), rewritten
  after each chunk (:data:`CHUNK` problems, seeded by (seed, chunk)), so a filter killed midway
  resumes from its last whole chunk and measures what an uninterrupted one would have;
* ``pool.jsonl``: the kept problems (``task``, ``id``, ``accuracy``), written last, atomically.

A run with the same settings reads ``pool.jsonl`` (a resume, or a rerun). Other settings are
measured in ``OUTPUT_DIR/pool.new/`` (:data:`STAGED`), starting from the accuracies of a
measurement that differs only in its band, and :func:`place` moves that folder over ``pool/``
when training begins: a run that fails before then leaves the earlier run's pool as it was, and
keeps its own measurement in ``pool.new/`` for the next try. Nothing is written before the first
chunk is measured.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any, Optional, Union

from ..jsonio import (
    check_output_file,
    dumps_line,
    read_input,
    read_records,
    write_atomic,
    write_json_atomic,
)
from ..sharding import derive_seed

#: the keys of ``pool_filter`` and their defaults (max_new_tokens None: trl.max_completion_length;
#: seed None: the recipe's seed; a fixed seed lets runs of several seeds share one pool)
DEFAULTS = {"band": [0.15, 0.75], "samples": 20, "max_new_tokens": None, "seed": None}
#: problems measured per chunk: the unit of resumption and of seeding
CHUNK = 32
#: bounds of ``samples`` (accuracies are multiples of 1/samples: 1024 resolves 0.001, finer than
#: any band; the paper measures 20) and of ``seed`` (the recipe's seed range)
MAX_SAMPLES = 1024
MAX_SEED = 2**32 - 1
#: the folder, beside ``pool/``, where a run measures its pool until training begins
STAGED = "pool.new"
#: the files of a pool folder
FILES = ("settings.json", "accuracy.jsonl", "pool.jsonl")


def resolve(setting: Union[bool, dict, None]) -> Optional[dict]:
    """The recipe's ``pool_filter`` with its defaults: None (no filter) for null or
    false, :data:`DEFAULTS` for true. A ValueError says what is wrong with a mapping."""
    if setting is None or setting is False:
        return None
    if setting is True:
        setting = {}
    unknown = [k for k in setting if k not in DEFAULTS]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; valid: {', '.join(DEFAULTS)}")
    cfg = {**DEFAULTS, **setting}
    band = cfg["band"]
    if (not isinstance(band, list) or len(band) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in band)
            or not 0.0 <= band[0] <= band[1] <= 1.0):
        raise ValueError(f"band={band!r}: must be [lo, hi] with 0 <= lo <= hi <= 1 (accuracies kept, bounds included)")
    for key, least, most in (("samples", 1, MAX_SAMPLES), ("max_new_tokens", 1, None), ("seed", 0, MAX_SEED)):
        value = cfg[key]
        if value is None and key in ("max_new_tokens", "seed"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least or (most and value > most):
            bounds = f"in [{least}, {most}]" if most else f">= {least}"
            raise ValueError(f"{key}={value!r}: must be an integer {bounds}")
    cfg["band"] = [float(v) for v in band]
    return cfg


def settings(recipe: Any, problems: list[tuple[str, dict]], cfg: dict, temperature: float, top_p: float,
             max_new_tokens: int) -> dict:
    """What the filtered pool of ``recipe``'s ``problems`` depends on (written to
    ``pool/settings.json``): the problems themselves in their order (a digest: a recipe seed draws
    other built-in problems), the seed they are measured with and the sampling settings."""
    digest = hashlib.sha256()
    for spec, rec in problems:
        digest.update(dumps_line([spec, str(rec["id"]), rec["problem"]]).encode())
    return {"model": recipe.model, "tasks": recipe.task_specs, "problems": recipe.problems, "split": recipe.split,
            "problems_sha256": digest.hexdigest(), "seed": pool_seed(recipe, cfg),
            "system_prompt": recipe.system_prompt, "band": cfg["band"],
            "samples": cfg["samples"], "temperature": float(temperature), "top_p": float(top_p),
            "max_new_tokens": int(max_new_tokens), "chunk": CHUNK}


def pool_seed(recipe: Any, cfg: dict) -> int:
    """The seed the pool is measured with: ``pool_filter.seed``, else the recipe's."""
    return recipe.seed if cfg["seed"] is None else cfg["seed"]


def _measured(path: Path, problems: list[tuple[str, dict]]) -> list[float]:
    """The accuracies ``accuracy.jsonl`` holds for the whole chunks at the head of
    ``problems`` (a row that does not match its problem ends them: what follows is measured
    again)."""
    if not path.exists():
        return []
    accuracies = []
    for row, (spec, rec) in zip(read_records(path, "pool accuracy file"), problems):
        accuracy = row.get("accuracy")
        if (row.get("task") != spec or row.get("id") != str(rec["id"]) or isinstance(accuracy, bool)
                or not isinstance(accuracy, (int, float)) or not 0.0 <= accuracy <= 1.0):
            break
        accuracies.append(float(accuracy))
    whole = len(accuracies) // CHUNK * CHUNK
    return accuracies if len(accuracies) == len(problems) else accuracies[:whole]


def filtered(recipe: Any, problems: list[tuple[str, dict]], lm: Any, cfg: dict, *, temperature: float,
             top_p: float, max_new_tokens: int, folder: Path) -> tuple[list[tuple[str, dict]], Optional[Path]]:
    """The problems of ``problems`` whose accuracy under the policy ``lm`` (a
    :class:`hista.models.LoadedModel`) lies in ``cfg["band"]``, in their order, and
    the folder to :func:`place` over ``folder`` when training begins (None: ``folder`` holds
    this pool already). Read from ``folder`` or its :data:`STAGED` sibling when one holds the
    pool of these settings, else measured into the sibling (resuming a measurement cut short,
    or reusing one that differs only in its band). An InputError about ``pool_filter`` when
    none is kept."""
    from ..rollout.config import SamplingConfig
    from ..rollout.engines import make_engine
    from ..rollout.sample import policy_accuracy

    want = settings(recipe, problems, cfg, temperature, top_p, max_new_tokens)
    staged = folder.with_name(STAGED)
    for path in (here / name for here in (folder, staged) for name in FILES):
        check_output_file(path)
    for here in (folder, staged):
        if _settings(here) == want and (here / "pool.jsonl").exists():
            ids = {(row.get("task"), row.get("id")) for row in read_records(here / "pool.jsonl", "pool file")}
            kept = [(spec, rec) for spec, rec in problems if (spec, str(rec["id"])) in ids]
            print(f"pool filter: {len(kept)} of {len(problems)} problems, as measured before "
                  f"({here / 'pool.jsonl'})", flush=True)
            return _nonempty(recipe, kept, problems, cfg), (None if here == folder else staged)
    config = SamplingConfig(temperature=float(temperature), top_p=float(top_p), max_new_tokens=int(max_new_tokens),
                            system_prompt=recipe.system_prompt)
    engine = make_engine("hf", lm, config)  # a cap past the context is refused before anything is written
    source = next((here for here in (staged, folder) if _same_measurement(_settings(here), want)), None)
    accuracies = [] if source is None else _measured(source / "accuracy.jsonl", problems)
    chunks = math.ceil(len(problems) / CHUNK)
    for k in range(math.ceil(len(accuracies) / CHUNK), chunks):  # whole chunks, or all problems, are measured
        part = problems[k * CHUNK: (k + 1) * CHUNK]
        print(f"pool filter: chunk {k + 1}/{chunks}: {len(part)} problems x {cfg['samples']} samples", flush=True)
        accuracies += policy_accuracy(engine, [rec for _, rec in part], cfg["samples"],
                                      seed=derive_seed(pool_seed(recipe, cfg), "pool", k))
        _save(staged, want, [_row(p, a) for p, a in zip(problems, accuracies)])
    if _settings(staged) != want:  # measured before under another band, or into pool/
        _save(staged, want, [_row(p, a) for p, a in zip(problems, accuracies)])
    lo, hi = cfg["band"]
    kept = [(p, a) for p, a in zip(problems, accuracies) if lo <= a <= hi]
    _write(staged / "pool.jsonl", [_row(p, a) for p, a in kept])
    print(f"pool filter: kept {len(kept)} of {len(problems)} problems with accuracy in [{lo}, {hi}] over "
          f"{cfg['samples']} samples of {lm.name}; wrote {staged / 'pool.jsonl'}", flush=True)
    return _nonempty(recipe, [p for p, _ in kept], problems, cfg), staged


def place(staged: Path, folder: Path) -> None:
    """Put the pool measured in ``staged`` in place of ``folder`` (the earlier run's pool, if
    any): when training begins."""
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder)
    else:
        folder.unlink(missing_ok=True)
    staged.rename(folder)


def _settings(folder: Path) -> Any:
    """What ``folder``'s ``settings.json`` holds (None: none, or not JSON: measured afresh)."""
    path = folder / "settings.json"
    if not path.exists():
        return None
    try:
        return json.loads(read_input(path, "pool settings").decode("utf-8", errors="replace"))
    except ValueError:
        return None


def _same_measurement(saved: Any, want: dict) -> bool:
    """Whether accuracies measured under the settings ``saved`` are those ``want`` measures (the
    band only chooses among them)."""
    return isinstance(saved, dict) and {**saved, "band": None} == {**want, "band": None}


def _save(staged: Path, want: dict, rows: list[dict]) -> None:
    """The measurement so far into ``staged``: a stale ``pool.jsonl`` removed, the rows, then
    the settings (so that settings never describe rows measured otherwise)."""
    staged.mkdir(parents=True, exist_ok=True)
    (staged / "pool.jsonl").unlink(missing_ok=True)
    _write(staged / "accuracy.jsonl", rows)
    write_json_atomic(staged / "settings.json", want)


def _write(path: Path, rows: list[dict]) -> None:
    """``rows`` as the canonical JSON lines :func:`hista.jsonio.append_jsonl` appends, atomically."""
    write_atomic(path, lambda fh: fh.writelines(dumps_line(r) for r in rows), kind="jsonl")


def _row(problem: tuple[str, dict], accuracy: float) -> dict:
    return {"task": problem[0], "id": str(problem[1]["id"]), "accuracy": float(accuracy)}


def _nonempty(recipe: Any, kept: list, problems: list, cfg: dict) -> list:
    if not kept:
        raise recipe.error("pool_filter", f"no problem of {len(problems)} has an accuracy in {cfg['band']} over "
                                          f"{cfg['samples']} samples: widen the band or draw more problems")
    return kept
