"""``sveb eval``: estimator values at the stored states against the Monte-Carlo targets
(SPEC §8). Nothing is generated; what an estimator declares it needs is taken from the case:
hidden states of its layer are recomputed from the stored token ids with the model that built
the cases, texts and offsets are stored, and the continuation rewards are the stored ones."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

import yaml
from tqdm.auto import tqdm

from .. import __version__, estimators
from ..errors import InputError
from ..estimators import Estimator
from ..models import LoadedModel, hidden_states, load
from ..types import Rollout, RolloutGroup, State
from . import cases, metrics
from .presets import DEFAULT_METHODS
from .results import MAX_VALUE


def parse_method(spec: str) -> tuple[str, Optional[str], dict]:
    """A method spec ``name[-profile][?key=value&...]`` (SPEC §8; e.g. ``hista-reference``,
    ``hista?layer=-6&interval=10``, ``mc?num=1``) as (estimator name, profile or None,
    parameters); values are read as YAML scalars. An InputError names a malformed spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError("a method is name[-profile][?key=value&...], got an empty one", field="methods")
    head, _, query = spec.strip().partition("?")
    params = {}
    for part in query.split("&") if query else []:
        key, sep, raw = part.partition("=")
        if not sep or not key:
            raise InputError(f"method {spec!r}: {part!r} is not key=value", field="methods")
        try:
            params[key] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise InputError(f"method {spec!r}: cannot read the value of {key!r}", field="methods") from None
    known = estimators.names()
    name, sep, profile = head.rpartition("-")
    if head not in known and sep and name in known:
        return name, profile, params
    return head, None, params


def build_estimator(spec: str) -> Estimator:
    """A fresh estimator for a method spec (SPEC §8, see :func:`parse_method`); an InputError
    names the method when the name, profile or a parameter is invalid."""
    name, profile, params = parse_method(spec)
    try:
        return estimators.get(name, profile=profile, **params)
    except (ValueError, TypeError) as exc:
        raise InputError(f"method {spec!r}: {exc}", field="methods") from None


def method_label(spec: str, estimator: Estimator) -> str:
    """What the report calls a method (SPEC §8): the estimator's label (with its profile) and,
    when the spec sets parameters, the spec's ``?key=value`` part."""
    query = spec.partition("?")[2]
    return estimator.method_label() + (f"?{query}" if query else "")


def evaluate(path: str | Path, methods: Sequence[str] = DEFAULT_METHODS, *, model: Optional[str] = None,
             lm: Optional[LoadedModel] = None, device: Optional[str] = None, progress: bool = True,
             n_boot: int = 2000) -> dict:
    """Evaluate ``methods`` on every case of the file ``path`` (SPEC §8); returns the results dict
    (settings, estimator configs, per-case values and the per-field summary). Raises an
    InputError, before any output is written, for a bad line, a model mismatch, a method that
    is invalid or fails on a case (naming the method)."""
    records = [r for r in cases.read(path) if r["kind"] == "case"]
    if not records:
        raise InputError("holds no cases", path=str(path))
    built = {(r["settings"]["model"], r["settings"]["revision"]) for r in records}
    if len(built) > 1:
        raise InputError(f"mixes cases of several models: {sorted(built)}", path=str(path))
    (recorded, revision), = built
    if model is not None and model != recorded:
        raise InputError(f"cases were built with model '{recorded}', not '{model}': hidden states "
                         "must come from the policy that sampled them", path=str(path))
    methods = list(methods)
    if len(set(methods)) != len(methods):
        raise InputError(f"a method is named twice in {', '.join(methods)}", field="methods")
    chosen = {m: build_estimator(m) for m in methods}
    for m, est in chosen.items():
        if est.needs_model:
            raise InputError(f"method {m!r} needs a learned model, which sveb eval does not provide yet",
                             field="methods")
    layers = sorted({est.hidden_layer() for est in chosen.values() if est.needs_hidden})
    if layers:
        lm = lm or load(recorded, device=device)
        if lm.revision != revision:
            raise InputError(f"cases were built with {recorded} revision '{revision}', but the model "
                             f"loaded now is revision '{lm.revision}'", path=str(path))
    rows = []
    for record in tqdm(records, desc="sveb eval", unit="case", disable=not progress):
        # one group per hidden layer in use (None: without hidden states)
        groups = {None: _group(record, None)}
        groups.update({layer: _group(record, _hidden(record, lm, layer, path)) for layer in layers})
        state = State(rollout=record["state"]["rollout"], t=record["state"]["t"])
        values = {}
        for m, est in chosen.items():
            group = groups[est.hidden_layer() if est.needs_hidden else None]
            try:
                values[m] = float(build_estimator(m).state_values(group, [state])[0])
            except Exception as exc:  # any failure of a method is the method's, named as such
                raise InputError(f"method {m!r} failed on case {record['key']}: {type(exc).__name__}: {exc}",
                                 path=str(path), field="methods") from None
            if math.isfinite(values[m]) and abs(values[m]) > MAX_VALUE:  # NaN and inf are stored as null
                raise InputError(f"method {m!r} gave the value {values[m]!r} on case {record['key']}, beyond "
                                 f"the {MAX_VALUE:g} a results file holds", path=str(path), field="methods")
        rows.append({"case_id": record["key"], "field": record["field"], "target": record["target"],
                     "group_mean": float(groups[None].rewards.mean()), "continuations": record["continuations"],
                     "state": record["state"], "values": values})
    try:
        summary = metrics.summarise(rows, methods, n_boot=n_boot)
    except (ValueError, OverflowError) as exc:  # e.g. an MCS@n row too costly to enumerate exactly
        raise InputError(f"cannot summarise the cases: {exc}", path=str(path)) from None
    return {
        "hista_version": __version__,
        "cases_file": str(path),
        "settings": records[0]["settings"],
        "methods": {m: est.to_dict() for m, est in chosen.items()},
        "labels": {m: method_label(m, est) for m, est in chosen.items()},
        "cases": rows,
        "summary": summary,
    }


def _hidden(record: dict, lm: LoadedModel, layer: int, path: str | Path) -> list:
    """Hidden states of ``layer`` for prompt + completion of every stored rollout of a case."""
    stored = record["rollouts"]
    try:
        return hidden_states(lm, [record["prompt_ids"]] * len(stored), [r["completion_ids"] for r in stored],
                             layer=layer)
    except IndexError:
        raise InputError(f"layer {layer} does not exist in {lm.name}: methods need hidden states of layer "
                         f"{layer}", path=str(path), field="methods") from None


def _group(record: dict, hidden: Optional[list]) -> RolloutGroup:
    """The case's group: stored rollouts (ids, text, offsets, reward), the given hidden states,
    and the state's stored continuation rewards (for estimators that need continuations)."""
    prompt, stored = record["prompt_ids"], record["rollouts"]
    hidden = hidden or [None] * len(stored)
    rollouts = [Rollout(prompt, r["completion_ids"], r["reward"], completion_text=r["completion_text"],
                        offsets=[tuple(o) for o in r["offsets"]], hidden=h) for r, h in zip(stored, hidden)]
    state = (record["state"]["rollout"], record["state"]["t"])
    return RolloutGroup(rollouts, prompt_id=record["key"], problem=record["problem"],
                        continuations={state: list(record["continuations"])})
