"""``sveb eval``: estimator values at the stored states against the Monte-Carlo targets
(SPEC §8). Nothing is generated; what an estimator declares it needs is taken from the case:
hidden states of its layer are recomputed from the stored token ids with the model that built
the cases, texts and offsets are stored, and the continuation rewards are the stored ones."""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import types
import typing
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml
from tqdm.auto import tqdm

from .. import __version__, estimators, yamlio
from ..errors import InputError
from ..estimators import Estimator
from ..models import LoadedModel, hidden_states, load
from ..models.forward import hidden_state_count
from ..types import Rollout, RolloutGroup, State
from . import cases, fits, metrics
from .presets import DEFAULT_METHODS
from .results import MAX_VALUE

#: spec keys that are not estimator parameters: ``label`` names the method in reports
RESERVED_KEYS = ("label",)


def read_scalar(raw: str) -> Any:
    """A parameter value of a method spec or a sweep grid, read as a YAML scalar (SPEC §8;
    :func:`hista.yamlio.scalar`): an InputError for bad YAML, an integer too long to read or
    nesting too deep."""
    return yamlio.scalar(raw)


def _parse(spec: str) -> tuple[str, Optional[str], dict, Optional[str]]:
    """(estimator name, profile or None, parameters, label or None) of a method spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError("a method is name[-profile][?key=value&...], got an empty one", field="methods")
    head, _, query = spec.strip().partition("?")
    params: dict[str, Any] = {}
    label = None
    for part in query.split("&") if query else []:
        key, sep, raw = part.partition("=")
        if not sep or not key:
            raise InputError(f"method {spec!r}: {part!r} is not key=value", field="methods")
        if key in params or (key == "label" and label is not None):
            raise InputError(f"method {spec!r}: {key!r} is set twice", field="methods")
        if key == "label":
            if not raw.strip():
                raise InputError(f"method {spec!r}: 'label' must not be empty", field="methods")
            label = raw
            continue
        try:
            params[key] = read_scalar(raw)
        except InputError as exc:
            raise InputError(f"method {spec!r}: cannot read the value of {key!r} ({exc.message})",
                             field="methods") from None
    known = estimators.names()
    name, sep, profile = head.rpartition("-")
    if head not in known and sep and name in known:
        return name, profile, params, label
    return head, None, params, label


def parse_method(spec: str) -> tuple[str, Optional[str], dict]:
    """A method spec ``name[-profile][?key=value&...]`` (SPEC §8; e.g. ``hista-reference``,
    ``hista?layer=-6&interval=10``, ``mc?num=1``) as (estimator name, profile or None,
    parameters); values are read as YAML scalars. The reserved key ``label=TEXT`` names the
    method in reports (:func:`method_label`) and is not a parameter. An InputError names a
    malformed spec (a part that is not key=value, a key set twice, an empty label)."""
    name, profile, params, _ = _parse(spec)
    return name, profile, params


def spec_label(spec: str) -> Optional[str]:
    """The ``label=`` of a method spec (SPEC §8), or None when it sets none."""
    return _parse(spec)[3]


def scalar_text(value: Any) -> str:
    """``value`` (a string, number, boolean or None) written so that a method spec reads it
    back as the same YAML scalar (SPEC §8): ``1e-05`` -> ``1.0e-05``, the string ``'5'`` quoted."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)
    return text.split("\n...")[0].strip()


def format_method(name: str, profile: Optional[str] = None, params: Optional[dict] = None,
                  label: Optional[str] = None) -> str:
    """The method spec ``name[-profile]?key=value&...&label=...`` of its parts (SPEC §8), the
    inverse of :func:`parse_method` and :func:`spec_label`; an InputError when a value cannot
    be written in a spec (a list, or text holding ``&``, ``=`` or ``?``)."""
    parts = []
    for key, value in (params or {}).items():
        if not (value is None or isinstance(value, (str, int, float, bool))):
            raise InputError(f"parameter {key!r}: expected a string, number or boolean, got {type(value).__name__}",
                             field="methods")
        parts.append(f"{key}={scalar_text(value)}")
    if label is not None:
        parts.append(f"label={label}")
    spec = (f"{name}-{profile}" if profile else name) + (f"?{'&'.join(parts)}" if parts else "")
    try:
        same = _parse(spec) == (name, profile, dict(params or {}), label)
    except InputError:
        same = False
    if not same:
        raise InputError(f"cannot write {spec!r} as a method spec: a name, value or label holds '-', '&', '=' or "
                         "'?'", field="methods")
    return spec


def read_methods_file(path: str | Path) -> list[str]:
    """The method specs of a YAML file (SPEC §8): a list whose entries are spec strings
    (``hista?layer=-6&label=Hista L-6``) or mappings ``{name, profile?, label?, params?}``
    (``params`` a mapping of scalars). An InputError names the file and the entry index."""
    path = Path(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the read
            raise InputError("is not a regular file", path=str(path))
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("does not exist", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the methods file ({getattr(exc, 'strerror', None) or exc})",
                         path=str(path)) from None
    data = yamlio.load(text, path=str(path), what="the methods file")
    if not isinstance(data, list) or not data:
        raise InputError("expected a non-empty YAML list of methods (spec strings or {name, profile, label, "
                         "params} mappings)", path=str(path))
    specs: list[str] = []
    for k, entry in enumerate(data):
        where = f"methods[{k}]"
        try:
            spec = _entry_spec(entry)
            _parse(spec)
        except InputError as exc:
            raise InputError(exc.message, path=str(path), field=where) from None
        if spec in specs:
            raise InputError(f"{spec!r} is already methods[{specs.index(spec)}]", path=str(path), field=where)
        specs.append(spec)
    return specs


def _entry_spec(entry: Any) -> str:
    """The spec of one methods-file entry (a spec string or a mapping)."""
    if isinstance(entry, str):
        return entry
    if not isinstance(entry, dict):
        raise InputError(f"expected a spec string or a mapping, got {type(entry).__name__}")
    unknown = sorted(set(map(str, entry)) - {"name", "profile", "label", "params"})
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(unknown)}; valid: name, profile, label, params")
    name, profile, label, params = (entry.get(k) for k in ("name", "profile", "label", "params"))
    if not isinstance(name, str) or not name:
        raise InputError("'name' must be an estimator name")
    for key, value in (("profile", profile), ("label", label)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError(f"{key!r} must be a non-empty string")
    if params is not None and not isinstance(params, dict):
        raise InputError(f"'params' must be a mapping, got {type(params).__name__}")
    return format_method(name, profile, {str(k): v for k, v in (params or {}).items()}, label)


def _type_problem(value: Any, hint: Any) -> Optional[str]:
    """What a value of type ``hint`` must be, when ``value`` is not one (None when it fits or
    the hint is not a plain scalar type)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        problems = [_type_problem(value, h) for h in options if h is not type(None)]
        return None if any(p is None for p in problems) else " or ".join(p for p in problems if p)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    checks = {bool: (isinstance(value, bool), "true or false"), int: (is_number and isinstance(value, int),
              "an integer"), float: (is_number, "a number"), str: (isinstance(value, str), "a string")}
    fits, what = checks.get(hint, (True, ""))
    return None if fits else what


def _check_types(spec: str, cls: type, params: dict) -> None:
    """An InputError naming the method and the key whose value has the wrong type for the
    estimator's configuration field (e.g. ``stride=abc``, ``include_self=3``)."""
    try:
        hints = typing.get_type_hints(cls.config_class)
    except Exception:  # a plugin's annotations that cannot be resolved: leave it to the estimator
        return
    for key, value in params.items():
        problem = _type_problem(value, hints[key]) if key in hints else None
        if problem:
            raise InputError(f"method {spec!r}: {key} must be {problem}, got {value!r}", field="methods")


def build_estimator(spec: str) -> Estimator:
    """A fresh estimator for a method spec (SPEC §8, see :func:`parse_method`); an InputError
    names the method when the name, profile, a parameter or the type of its value is invalid."""
    name, profile, params = parse_method(spec)
    try:
        _check_types(spec, estimators.estimator_class(name, profile), params)
        return estimators.get(name, profile=profile, **params)
    except InputError as exc:
        if exc.message.startswith(f"method {spec!r}"):
            raise
        raise InputError(f"method {spec!r}: {exc.message}", field="methods") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"method {spec!r}: {exc}", field="methods") from None


def method_label(spec: str, estimator: Estimator) -> str:
    """What the report calls a method (SPEC §8): the spec's ``label=`` when it sets one, else
    the estimator's label (with its profile) and, when the spec sets parameters, the spec's
    ``?key=value`` part."""
    label = spec_label(spec)
    if label is not None:
        return label
    query = spec.partition("?")[2]
    return estimator.method_label() + (f"?{query}" if query else "")


def read_cases(path: str | Path, model: Optional[str] = None) -> tuple[list[dict], str, str]:
    """The case records of ``path`` (skips left out) and the model and revision that built them
    (SPEC §8); an InputError when the file holds no case, mixes models or sampling engines
    (``settings.engine``), or was built with another model than ``model``."""
    records = [r for r in cases.read(path) if r["kind"] == "case"]
    if not records:
        raise InputError("holds no cases", path=str(path))
    built = {(r["settings"]["model"], r["settings"]["revision"]) for r in records}
    if len(built) > 1:
        raise InputError(f"mixes cases of several models: {sorted(built)}", path=str(path))
    (recorded, revision), = built
    engines = [r["settings"].get("engine", "an unrecorded engine (an older build)") for r in records]
    other = next((k for k, e in enumerate(engines) if e != engines[0]), None)
    if other is not None:
        raise InputError(f"mixes cases sampled by several engines: {records[0]['key']!r} by {engines[0]}, "
                         f"{records[other]['key']!r} by {engines[other]} (one file, one engine)", path=str(path),
                         field="settings.engine")
    if model is not None and model != recorded:
        raise InputError(f"cases were built with model '{recorded}', not '{model}': hidden states "
                         "must come from the policy that sampled them", path=str(path))
    return records, recorded, revision


def build_methods(methods: Sequence[str], *, critics: bool = False) -> dict[str, Estimator]:
    """Method spec -> estimator for every method (SPEC §8); an InputError for a method named
    twice, an invalid one, a label two methods share, or one that needs a learned model: a
    trained critic (SPEC §4.5) unless ``critics`` (critic folders were given, see
    :func:`open_critics`), any other model always."""
    methods = list(methods)
    if len(set(methods)) != len(methods):
        raise InputError(f"a method is named twice in {', '.join(methods)}", field="methods")
    chosen = {m: build_estimator(m) for m in methods}
    for m, est in chosen.items():
        if not est.needs_model:
            continue
        need = getattr(est, "critic_requirement", None)
        if need is None:
            raise InputError(f"method {m!r} needs a learned model, which sveb eval does not provide",
                             field="methods")
        if not critics:
            mode, lam = need()["mode"], need()["lam"]
            raise InputError(f"method {m!r} reads a trained critic: pass --critic DIR, a folder written by "
                             f"hista critic train --mode {mode} --lam {lam:g}", field="--critic")
    seen: dict[str, str] = {}
    for m, est in chosen.items():
        label = method_label(m, est)
        if label in seen and (spec_label(m) is not None or spec_label(seen[label]) is not None):
            raise InputError(f"methods {seen[label]!r} and {m!r} have the same label {label!r}", field="methods")
        seen.setdefault(label, m)
    return chosen


@dataclasses.dataclass
class Setup:
    """What scoring methods on cases needs, prepared once before the first case (SPEC §8):
    the estimators by method spec, the model that built the cases (None when no method reads
    hidden states), each hidden-state method's layer (its structure rule resolved for that
    model), the critic set of each method that reads a trained critic
    (:func:`open_critics`) and the fit set of each cross-fitted method
    (:func:`hista.sveb.fits.open_fits`)."""

    methods: dict[str, Estimator]
    lm: Optional[LoadedModel] = None
    layers: dict[str, int] = dataclasses.field(default_factory=dict)
    critics: dict = dataclasses.field(default_factory=dict)
    fits: dict = dataclasses.field(default_factory=dict)

    def hidden_layers(self) -> list[int]:
        """The hidden layers the methods read, sorted (empty when none reads any)."""
        return sorted(set(self.layers.values()))


def open_model(chosen: dict[str, Estimator], path: str | Path, recorded: str, revision: str, *,
               lm: Optional[LoadedModel] = None, device: Optional[str] = None
               ) -> tuple[Optional[LoadedModel], dict[str, int]]:
    """The model that built the cases, when a method needs hidden states (``lm`` when given,
    else loaded), or None, and each such method's hidden layer for that model (SPEC §8; a
    layer left to the structure rule resolved from the model's depth); an InputError for
    another revision or a layer the model does not have."""
    wanted = {m: est for m, est in chosen.items() if est.needs_hidden}
    if not wanted:
        return None, {}
    lm = lm or load(recorded, device=device)
    if lm.revision != revision:
        raise InputError(f"cases were built with {recorded} revision '{revision}', but the model "
                         f"loaded now is revision '{lm.revision}'", path=str(path))
    count = hidden_state_count(lm)
    layers = {m: est.hidden_layer(count - 1) for m, est in wanted.items()}
    for layer in sorted(set(layers.values())):
        if not -count <= layer < count:
            raise InputError(f"layer {layer} does not exist in {lm.name} (it has {count} hidden states, layers "
                             f"{-count} to {count - 1}): methods need hidden states of layer {layer}",
                             path=str(path), field="methods")
    return lm, layers


def prepare(chosen: dict[str, Estimator], records: Sequence[dict], path: str | Path, recorded: str, revision: str,
            *, critics: Optional[Sequence[str | Path]] = None, bound: Optional[dict] = None,
            lm: Optional[LoadedModel] = None, device: Optional[str] = None, memo: Optional[dict] = None,
            progress: bool = True) -> Setup:
    """The :class:`Setup` of ``chosen`` on the case ``records`` of ``path`` (SPEC §8): critics
    matched from the ``critics`` folders (``bound``: matched already, by
    :func:`open_critics`), the model loaded and layers resolved
    (:func:`open_model`), and every cross-fitted method fitted over the folds of the cases'
    problems (:func:`hista.sveb.fits.open_fits`, one forward pass per problem, kept in
    ``memo`` for the first case). Raises what those raise."""
    if bound is None:
        bound = open_critics(chosen, critics, records, recorded, revision, path, device=device)
    lm, layers = open_model(chosen, path, recorded, revision, lm=lm, device=device)
    setup = Setup(chosen, lm, layers, bound)
    setup.fits = fits.open_fits(chosen, layers, records, lambda record, wanted: _hidden(record, lm, wanted, path, memo),
                                _group, path=str(path), progress=progress)
    return setup


def open_critics(chosen: dict[str, Estimator], folders: Optional[Sequence[str | Path]], records: Sequence[dict],
                 recorded: str, revision: str, path: str | Path, *, device: Optional[str] = None) -> dict:
    """Method -> the critic set (:class:`hista.critic.store.CriticSet`) of every method that
    reads a trained critic (SPEC §4.5, §8), from the ``--critic`` ``folders`` (each a folder
    written by ``hista critic train``, or a folder of such folders), matched by mode and λ and
    checked against the cases: an InputError for a critic of another model or revision, a
    PPO-N critic trained on other rollouts than the cases', a PPO-1 critic whose folds do not
    cover a case's problem, or a method no folder (or several) serves. The critics load on
    ``device`` when first used and share the work of their frozen layers. Empty when no
    method reads a critic (an InputError when ``folders`` were given all the same: a flag
    that would do nothing)."""
    wanted = {m: est for m, est in chosen.items() if est.needs_model}
    if not wanted:
        if folders:
            raise InputError(f"critic folders were given ({', '.join(map(str, folders))}), but no method reads a "
                             "critic (ppo-1?lam=..., ppo-n?lam=...)", field="--critic")
        return {}
    from ..critic import store
    from ..critic.train import FrozenFeatures

    shared = FrozenFeatures(keep_prompts=2)  # the critics read one group at a time: its frozen layers run once
    sets = [s for folder in folders or [] for s in store.discover(folder, device=device, features=shared)]
    bound = {m: store.match(sets, m, est.critic_requirement()) for m, est in wanted.items()}
    for critic_set in {id(s): s for s in bound.values()}.values():
        critic_set.check_cases(records, recorded, revision, path)
    return bound


def evaluate_case(record: dict, setup: Setup, path: str | Path, memo: Optional[dict] = None) -> dict:
    """The result row of one case (SPEC §8): ``case_id``, ``field``, ``target``, ``group_mean``,
    ``continuations``, ``state``, ``length`` (completion tokens of the state's rollout),
    ``values`` (method -> value at the state) and, for methods that resolve their structure per
    group (Hista's default profile), ``structure`` (method -> the values used, e.g.
    ``{"interval": 10, "stride": 1}``). The hidden states of every layer the methods need
    come from one forward pass; given a ``memo`` dict (empty at first, then passed to each call
    in turn), consecutive cases of the same group of rollouts (the states of one problem) share
    that pass. A method that reads a critic gets the one of ``setup.critics`` that scores the
    case's problem, a cross-fitted one the fit of ``setup.fits`` without the case's fold. An
    InputError names a method that fails or gives a value beyond what a results file holds."""
    layers = setup.hidden_layers()
    hidden = _hidden(record, setup.lm, layers, path, memo) if layers else {}
    # one group per hidden layer in use (None: without hidden states)
    groups = {None: _group(record, None)}
    groups.update({layer: _group(record, hidden[layer]) for layer in layers})
    state = State(rollout=record["state"]["rollout"], t=record["state"]["t"])
    values, structure = {}, {}
    for m, est in setup.methods.items():
        group = groups[setup.layers.get(m)]
        try:
            if m in setup.fits:
                fresh = setup.fits[m].for_case(record)
            else:
                fresh = build_estimator(m)
            if est.needs_model:
                fresh.use_critic(setup.critics[m].for_case(record))
            values[m] = float(fresh.state_values(group, [state])[0])
            resolved = fresh.resolved(group)
            if resolved:
                structure[m] = resolved
        except Exception as exc:  # any failure of a method is the method's, named as such
            raise InputError(f"method {m!r} failed on case {record['key']}: {type(exc).__name__}: {exc}",
                             path=str(path), field="methods") from None
        if math.isfinite(values[m]) and abs(values[m]) > MAX_VALUE:  # NaN and inf are stored as null
            raise InputError(f"method {m!r} gave the value {values[m]!r} on case {record['key']}, beyond "
                             f"the {MAX_VALUE:g} a results file holds", path=str(path), field="methods")
    rollout = record["rollouts"][record["state"]["rollout"]]
    return {"case_id": record["key"], "field": record["field"], "target": record["target"],
            "group_mean": float(groups[None].rewards.mean()), "continuations": record["continuations"],
            "state": record["state"], "length": len(rollout["completion_ids"]), "values": values,
            **({"structure": structure} if structure else {})}


def evaluate(path: str | Path, methods: Sequence[str] = DEFAULT_METHODS, *, model: Optional[str] = None,
             lm: Optional[LoadedModel] = None, device: Optional[str] = None, progress: bool = True,
             n_boot: int = 2000, critics: Optional[Sequence[str | Path]] = None) -> dict:
    """Evaluate ``methods`` on every case of the file ``path`` (SPEC §8); returns the results dict
    (settings, estimator configs, labels, per-case rows of :func:`evaluate_case` and the
    per-field summary; ``critics``, method -> the critic it read, when a method reads one;
    ``layers``, method -> the hidden layer it read; ``fits``, method -> its folds, for a
    cross-fitted method). Hidden states of every layer the methods need come from one forward
    pass per case; methods that read a trained critic (``ppo-1``, ``ppo-n``) find it among the
    ``critics`` folders (:func:`open_critics`); cross-fitted methods (``probe``) are fitted
    first, fold by fold (:func:`prepare`). Raises an InputError, before any output is written,
    for a bad line, a model mismatch, a method that is invalid or fails on a case (naming the
    method), a missing or mismatched critic."""
    records, recorded, revision = read_cases(path, model)
    methods = list(methods)
    chosen = build_methods(methods, critics=bool(critics))
    memo: dict = {}
    setup = prepare(chosen, records, path, recorded, revision, critics=critics, lm=lm, device=device, memo=memo,
                    progress=progress)
    rows = [evaluate_case(record, setup, path, memo)
            for record in tqdm(records, desc="sveb eval", unit="case", disable=not progress)]
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
        **({"critics": {m: c.describe() for m, c in setup.critics.items()}} if setup.critics else {}),
        **({"layers": setup.layers} if setup.layers else {}),
        **({"fits": {m: fit.describe() for m, fit in setup.fits.items()}} if setup.fits else {}),
    }


def _hidden(record: dict, lm: LoadedModel, layers: list[int], path: str | Path,
            memo: Optional[dict] = None) -> dict[int, list]:
    """Hidden states of ``layers`` (layer -> one tensor per rollout) for prompt + completion of
    every stored rollout of a case, from one forward pass, or from ``memo`` when it holds the
    same prompt and completions (it keeps the last group only)."""
    stored = record["rollouts"]
    key = (tuple(record["prompt_ids"]), tuple(tuple(r["completion_ids"]) for r in stored), tuple(layers))
    if memo is not None and memo.get("key") == key:
        return memo["hidden"]
    try:
        hidden = hidden_states(lm, [record["prompt_ids"]] * len(stored), [r["completion_ids"] for r in stored],
                               layers=layers)
    except IndexError as exc:
        raise InputError(f"{exc}: methods need hidden states of layers {layers}", path=str(path),
                         field="methods") from None
    if memo is not None:
        memo.update(key=key, hidden=hidden)
    return hidden


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
