"""``sveb build``: sample rollouts, pick states, sample Monte-Carlo continuations.

Every problem gets its own seeds, derived from the build seed and the problem id, so a case
does not depend on which other cases were built before it: a resumed build writes the same
bytes as an uninterrupted one, and the same seed gives the same file.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Optional, Sequence

from tqdm.auto import tqdm

from .. import __version__, provenance, tasks
from ..errors import InputError
from ..jsonio import check_not_inputs, check_output_file, cut_unterminated
from ..models import LoadedModel
from ..rewards import verify
from ..rollout.engine import check_prompts
from ..rollout.engines import Engine, load_model, make_engine
from ..rollout.sample import score
from ..sharding import chunks_of, derive_seed
from . import cases, shards
from .presets import BuildConfig


def build(config: BuildConfig, out: str | Path, *, lm: Optional[LoadedModel] = None, progress: bool = True,
          shard: Optional[tuple[int, int]] = None) -> dict:
    """Build (or resume) the case file ``out``; returns counts of cases written, skipped and
    already present.

    Problems are processed in fixed chunks of ``batch_size // rollouts`` problems whose
    rollouts (and then whose continuations) are sampled in shared batches, so that decoding
    steps are amortised. The chunks and their seeds depend only on the problem list, so a
    resumed build regenerates an unfinished chunk exactly and appends only its missing
    records. ``shard`` (K, N) builds only the chunks of shard K of N
    (:mod:`hista.sveb.shards`) and writes its manifest beside ``out``. Before anything is
    created, cut or appended, every problem of a chunk left to sample must fit the model's
    context with ``max_new_tokens`` (:func:`hista.rollout.engine.check_prompts`).
    """
    out = Path(out)
    _check_out(out, config, shard)
    loaded = [(spec, p) for spec in config.tasks
              for p in tasks.load(spec, n=config.problems, seed=config.seed, split=config.split)]
    problems = [p for _, p in loaded]
    existing = cases.read(out, partial=True)  # checked whole before anything is cut or appended
    lm = lm or load_model(config.engine, config.model)
    engine = make_engine(config.engine, lm, config.sampling(), tensor_parallel_size=config.tensor_parallel_size)
    settings = config.settings(lm.revision, engine.identity())
    _check_settings(out, existing, settings)
    plan = _Plan.of(problems, config, shard, done={r["key"] for r in existing})
    # every problem this run will sample (a chunk is sampled whole) fits the context with the cap
    check_prompts(lm, engine.config.max_new_tokens, [(f"{spec}/{p['id']}", p["problem"])
                                                     for k, (spec, p) in enumerate(loaded)
                                                     if k // plan.per_chunk in plan.todo],
                  engine.config.system_prompt)
    out.parent.mkdir(parents=True, exist_ok=True)
    cut_unterminated(out)  # every check has passed: the line a crash cut short goes
    if shard is not None:
        shards.write_manifest(out, shards.manifest(shard, settings, len(problems), plan.order()))
    return _sample(engine, config, settings, out, plan, present=len(existing), progress=progress)


def _check_out(out: Path, config: BuildConfig, shard: Optional[tuple[int, int]]) -> None:
    """Refuse an output that is an input, cannot be written, or is gzipped (a build appends plain lines)."""
    check_not_inputs([out, *([shards.manifest_path(out)] if shard else [])], tasks.input_files(config.tasks))
    check_output_file(out, "jsonl")
    if out.name.endswith(".gz"):
        raise InputError("build appends plain JSON lines: give a .jsonl name and compress the finished file",
                         path=str(out))


def _check_settings(out: Path, existing: list[dict], settings: dict) -> None:
    """Refuse to resume a file built with other settings, naming the first such line and the fields."""
    for number, record in enumerate(existing, start=1):
        if record["settings"] != settings:
            changed = sorted(k for k in settings.keys() | record["settings"].keys()
                             if settings.get(k) != record["settings"].get(k))
            raise InputError(f"was built with other settings ({', '.join(changed)} differ); "
                             "use another --out or the same settings", path=str(out), line=number)


@dataclasses.dataclass
class _Plan:
    """A build's chunks, those this run covers, each problem's keys, the keys present, the chunks to sample."""

    per_chunk: int
    chunks: list[list[dict]]
    picked: Sequence[int]
    keys: dict[str, list[str]]
    done: set[str]
    todo: set[int]

    @classmethod
    def of(cls, problems: list[dict], config: BuildConfig, shard: Optional[tuple[int, int]], done: set[str]) -> "_Plan":
        """Chunks of ``batch_size // rollouts`` problems; one is to sample unless all its records are present."""
        per_chunk = max(1, config.batch_size // config.rollouts)
        chunks = [problems[k : k + per_chunk] for k in range(0, len(problems), per_chunk)]
        picked = chunks_of(len(chunks), shard) if shard is not None else range(len(chunks))
        keys = {p["id"]: [f"{p['id']}#s{k}" for k in range(config.states_per_problem)] for p in problems}
        todo = {c for c in picked
                if not all(p["id"] in done or all(k in done for k in keys[p["id"]]) for p in chunks[c])}
        return cls(per_chunk, chunks, picked, keys, done, todo)

    def order(self) -> list[tuple[int, str]]:
        """(global position, problem id) of each problem this run covers, for a shard's manifest."""
        return [(c * self.per_chunk + j, p["id"]) for c in self.picked for j, p in enumerate(self.chunks[c])]


def _sample(engine: Engine, config: BuildConfig, settings: dict, out: Path, plan: _Plan, *, present: int,
            progress: bool) -> dict:
    """Sample the chunks left, appending each new record as its chunk ends, with a progress bar; the counts."""
    counts = {"cases": 0, "skipped": 0, "present": present}
    bar = tqdm(total=sum(len(plan.chunks[c]) for c in plan.picked), desc="sveb build", unit="problem",
               disable=not progress)
    for c in plan.picked:
        chunk = plan.chunks[c]
        if c not in plan.todo:
            bar.update(len(chunk))
            continue
        for record in _chunk_records(engine, config, settings, chunk, plan.keys):
            if record["key"] not in plan.done:
                cases.append(out, record)
                counts["skipped" if record["kind"] == "skip" else "cases"] += 1
        bar.update(len(chunk))
        bar.set_postfix(cases=counts["cases"] + counts["present"], skipped=counts["skipped"])
    bar.close()
    return counts


def _chunk_records(engine: Engine, config: BuildConfig, settings: dict, chunk: list[dict],
                   keys: dict[str, list[str]]) -> list[dict]:
    """The records of one chunk of problems, in problem order: G rollouts per problem, a skip
    record for a problem out of the accuracy range, else one case per state: a position drawn
    uniformly inside one rollout's completion and M verified continuations from it."""
    first = chunk[0]["id"]
    groups = engine.generate([p["problem"] for p in chunk], config.rollouts, seed=derive_seed(config.seed, first))
    states, records = _pick_states(config, settings, chunk, groups, keys)
    if not states:
        return records
    records += _case_records(engine, config, settings, states, first)
    order = {p["id"]: n for n, p in enumerate(chunk)}
    return sorted(records, key=lambda r: (order[r["key"].split("#")[0]], r["key"]))


def _pick_states(config: BuildConfig, settings: dict, chunk: list[dict], groups: list,
                 keys: dict[str, list[str]]) -> tuple[list[tuple], list[dict]]:
    """The states of each problem in range (each drawn from its own seed), and a skip record for the others."""
    states, records = [], []
    for problem, group in zip(chunk, groups):
        score(problem, group)
        accuracy = sum(r.reward for r in group) / len(group)
        eligible = [i for i, r in enumerate(group) if len(r.completion_ids) >= 2]
        in_range = ((config.lo is None or accuracy >= config.lo - 1e-9)
                    and (config.hi is None or accuracy <= config.hi + 1e-9))
        if not in_range or not eligible:
            reason = "accuracy out of range" if not in_range else "no completion of 2+ tokens"
            records.append({"kind": "skip", "key": problem["id"], "settings": settings,
                            "accuracy": accuracy, "reason": reason})
            continue
        first = None  # with same_rollout: the rollout drawn for the problem's first state
        for key in keys[problem["id"]]:
            rng = random.Random(derive_seed(config.seed, key, "state"))
            i = rng.choice(eligible)
            if config.same_rollout:
                first = i if first is None else first
                i = first
            t = rng.randint(1, len(group[i].completion_ids) - 1)
            states.append((problem, group, accuracy, key, i, t))
    return states, records


def _case_records(engine: Engine, config: BuildConfig, settings: dict, states: list[tuple], first: str) -> list[dict]:
    """One case per state: M continuations of its prefix (shared batches), verified within the cap."""
    tok = engine.lm.tokenizer
    prefixes = [group[i].prompt_ids + group[i].completion_ids[:t] for _, group, _, _, i, t in states]
    longest = max(config.max_new_tokens - t for *_, t in states)
    conts = engine.generate_from_ids(prefixes, config.continuations, seed=derive_seed(config.seed, first, "continue"),
                                     max_new_tokens=max(1, longest))
    by_key = {}
    for (problem, group, accuracy, key, i, t), samples in zip(states, conts):
        prefix = group[i].completion_ids[:t]
        budget = max(1, config.max_new_tokens - t)  # the whole completion stays within max_new_tokens
        rewards = [verify(problem["verifier"], tok.decode(prefix + c.completion_ids[:budget], skip_special_tokens=True),
                          problem["answer"]) for c in samples]
        by_key[key] = {
            "kind": "case",
            "key": key,
            "settings": settings,
            "hista_version": __version__,
            "code": provenance.code(),
            "problem": problem,
            "field": problem["field"],
            "prompt_text": group[i].prompt_text,
            "prompt_ids": group[i].prompt_ids,
            "rollouts": [{"completion_ids": r.completion_ids, "completion_text": r.completion_text,
                          "offsets": [list(o) for o in r.offsets], "reward": r.reward} for r in group],
            "accuracy": accuracy,
            "state": {"rollout": i, "t": t},
            "continuations": rewards,
            "target": sum(rewards) / len(rewards),
        }
    return list(by_key.values())
