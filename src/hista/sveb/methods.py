"""SVEB methods: a method spec ``name[-profile][?key=value&...]`` is parsed here, once,
into a :class:`Method` (the spec, its estimator, the label reports print, whether it reads a
trained critic or is the group mean); ``sveb eval``, ``sveb sweep`` and the report pass those
records along, and results files record them (:meth:`Method.record`), so a report reads what a
method is from the results and never rebuilds an estimator.

Reading order: ``parse_method`` / ``format_method`` (the spec text), ``read_methods_file`` (a YAML
list of specs), ``build_method`` / ``build_methods`` (spec -> :class:`Method`, checked), and
``from_results`` (the methods a results file records).
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import types
import typing
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import yaml

from .. import estimators, yamlio
from ..errors import InputError
from ..estimators import Estimator
from ..estimators.group_mean import GroupMean

__all__ = ["MethodSpec", "Method", "parse_method", "format_method", "scalar_text", "read_methods_file",
           "build_method", "build_methods", "unknown_method", "from_results"]


class MethodSpec(NamedTuple):
    """The parts of a method spec: estimator name, profile (None: the default),
    parameters (YAML scalars) and the ``label=`` it sets (None: automatic)."""

    name: str
    profile: Optional[str]
    params: dict
    label: Optional[str]


def parse_method(spec: str) -> MethodSpec:
    """The parts of a method spec ``name[-profile][?key=value&...]`` (e.g.
    ``hista-reference``, ``hista?layer=-6&interval=10``, ``mc?num=1``); values are read as YAML
    scalars (:func:`hista.yamlio.scalar`). The reserved key ``label=TEXT`` names the method in
    reports and is not a parameter. An InputError names a malformed spec (a part that is not
    key=value, a key set twice, an empty label, a value that is not a readable scalar)."""
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
            params[key] = yamlio.scalar(raw)
        except InputError as exc:
            raise InputError(f"method {spec!r}: cannot read the value of {key!r} ({exc.message})",
                             field="methods") from None
    known = estimators.names()
    name, sep, profile = head.rpartition("-")
    if head not in known and sep and name in known:
        return MethodSpec(name, profile, params, label)
    return MethodSpec(head, None, params, label)


def scalar_text(value: Any) -> str:
    """``value`` (a string, number, boolean or None) written so that a method spec reads it
    back as the same YAML scalar: ``1e-05`` -> ``1.0e-05``, the string ``'5'`` quoted."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)
    return text.split("\n...")[0].strip()


def format_method(name: str, profile: Optional[str] = None, params: Optional[dict] = None,
                  label: Optional[str] = None) -> str:
    """The method spec ``name[-profile]?key=value&...&label=...`` of its parts, the
    inverse of :func:`parse_method`; an InputError when a value cannot be written in a spec (a
    list, or text holding ``&``, ``=`` or ``?``)."""
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
        same = parse_method(spec) == (name, profile, dict(params or {}), label)
    except InputError:
        same = False
    if not same:
        raise InputError(f"cannot write {spec!r} as a method spec: a name, value or label holds '-', '&', '=' or "
                         "'?'", field="methods")
    return spec


def read_methods_file(path: str | Path) -> list[str]:
    """The method specs of a YAML file: a list whose entries are spec strings
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
            parse_method(spec)
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


@dataclasses.dataclass(frozen=True)
class Method:
    """One SVEB method, its spec parsed once: ``spec`` (the row key of results),
    ``name`` (the registered estimator), ``config`` (its configuration), ``label`` (what reports
    call it: the spec's ``label=``, else the estimator's label with the spec's ``?key=value``
    part), ``labelled`` (the label was chosen in the spec), ``estimator_label`` (the
    estimator's own label, ``PPO-1``), ``critic`` (``{"mode", "lam"}`` of the trained critic it
    reads, SPEC §4.5, else None), ``baseline`` (the group mean, GRPO) and ``estimator`` (built
    once; None for a method read back from a results file)."""

    spec: str
    name: str
    config: dict
    label: str
    labelled: bool
    estimator_label: str
    critic: Optional[dict] = None
    baseline: bool = False
    estimator: Optional[Estimator] = dataclasses.field(default=None, compare=False, repr=False)

    def record(self) -> dict:
        """What a results file records of the method (``methods.<spec>``): ``name``,
        ``config``, ``estimator_label``, ``labelled``, ``critic`` and ``baseline`` (the label
        is in the file's ``labels``)."""
        return {"name": self.name, "config": self.config, "estimator_label": self.estimator_label,
                "labelled": self.labelled, "critic": self.critic, "baseline": self.baseline}


def build_method(spec: str) -> Method:
    """The :class:`Method` of a spec with a fresh estimator (:func:`parse_method`); an
    InputError names the method when the name, profile, a parameter or the type of its value
    is invalid."""
    name, profile, params, label = parse_method(spec)
    try:
        _check_types(spec, estimators.estimator_class(name, profile), params)
        est = estimators.get(name, profile=profile, **params)
    except InputError as exc:
        if exc.message.startswith(f"method {spec!r}"):
            raise
        raise InputError(f"method {spec!r}: {exc.message}", field="methods") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"method {spec!r}: {exc}", field="methods") from None
    query = "&".join(p for p in spec.partition("?")[2].split("&") if p and not p.startswith("label="))
    automatic = est.method_label() + (f"?{query}" if query else "")
    critic = est.critic_requirement() if estimators.needs(est).critic == "folder" else None
    described = est.to_dict()
    return Method(spec, described["name"], described["config"], label if label is not None else automatic,
                  label is not None, est.method_label(), critic, isinstance(est, GroupMean), est)


def build_methods(specs: Sequence[str], *, critics: bool = False) -> dict[str, Method]:
    """Spec -> :class:`Method` for every spec; an InputError for a method named twice,
    an invalid one, a label two methods share (when one of them chose it), or one that needs a
    learned model: a trained critic (SPEC §4.5) unless ``critics`` (critic folders were given),
    any other model always."""
    specs = list(specs)
    if len(set(specs)) != len(specs):
        raise InputError(f"a method is named twice in {', '.join(specs)}", field="methods")
    chosen = {s: build_method(s) for s in specs}
    for s, method in chosen.items():
        what = estimators.refusal("sveb eval", method.estimator)
        if what is not None:
            raise InputError(f"method {s!r} needs {what}, which sveb eval does not provide", field="methods")
        if method.critic is None:
            continue
        if not critics:
            raise InputError(f"method {s!r} reads a trained critic: pass --critic DIR, a folder written by "
                             f"hista critic train --mode {method.critic['mode']} --lam {method.critic['lam']:g}",
                             field="--critic")
    seen: dict[str, Method] = {}
    for method in chosen.values():
        other = seen.setdefault(method.label, method)
        if other is not method and (method.labelled or other.labelled):
            raise InputError(f"methods {other.spec!r} and {method.spec!r} have the same label {method.label!r}",
                             field="methods")
    return chosen


def unknown_method(spec: str, label: Optional[str] = None) -> Method:
    """A row key no registered estimator reads (a plugin not installed here, a hand-made
    results file): labelled ``label`` (else the key), neither a critic nor the group
    mean."""
    return Method(spec, spec, {}, label if label is not None else spec, label is not None, label or spec)


def from_results(results: Mapping[str, Any]) -> dict[str, Method]:
    """Spec -> :class:`Method` of the methods a results object records (as
    :func:`hista.sveb.results.read` returns it), labelled as its ``labels`` say. A method
    recorded before results held whole method records (no ``estimator_label``) is read from
    its spec, or kept as an :func:`unknown_method` when no estimator here reads it."""
    labels = results.get("labels") or {}
    out = {}
    for spec, record in results["methods"].items():
        label = labels.get(spec)
        if "estimator_label" in record:
            out[spec] = Method(spec, record["name"], record.get("config") or {}, label or spec,
                               bool(record.get("labelled")), record["estimator_label"], record.get("critic"),
                               bool(record.get("baseline")))
            continue
        try:
            method = build_method(spec)
        except InputError:
            out[spec] = unknown_method(spec, label)
            continue
        chosen = method.labelled or (label is not None and label != method.label)
        out[spec] = dataclasses.replace(method, label=label or method.label, labelled=chosen, estimator=None)
    return out
