"""``sveb eval``: estimator values at the stored states against the Monte-Carlo targets. Nothing is
generated; what an estimator declares it needs is taken from the case:
hidden states of its layer are recomputed from the stored token ids with the model that built
the cases, texts and offsets are stored, and the continuation rewards are the stored ones."""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import torch
from tqdm.auto import tqdm

from .. import __version__, provenance
from ..errors import InputError
from ..estimators.leakage import reward_leak
from ..models import LoadedModel, hidden_states, load
from ..models.forward import hidden_state_count
from ..types import State
from . import cases, fits, metrics, paired, ranks, segments
from .methods import Method, build_methods
from .presets import DEFAULT_METHODS
from .results import MAX_VALUE
from .rows import CaseRow, RowState


@dataclasses.dataclass
class Setup:
    """What scoring methods on cases needs, prepared once before the first case:
    the case file, the estimators by method spec, the model that built the cases (None when no
    method reads hidden states), each hidden-state method's layer (its structure rule resolved
    for that model), the critic set of each method that reads a trained critic
    (:func:`open_critics`), the fit set of each cross-fitted method
    (:func:`hista.sveb.fits.open_fits`) and the store of the groups' hidden states
    (:class:`GroupStates`; without one, each case's group is read through the model anew)."""

    case_file: cases.CaseFile
    methods: dict[str, Method]
    lm: Optional[LoadedModel] = None
    layers: dict[str, int] = dataclasses.field(default_factory=dict)
    critics: dict = dataclasses.field(default_factory=dict)
    fits: dict = dataclasses.field(default_factory=dict)
    protocol: str = "leak-free"
    states: Optional["GroupStates"] = None

    def hidden_layers(self) -> list[int]:
        """The hidden layers the methods read, sorted (empty when none reads any)."""
        return sorted(set(self.layers.values()))


def open_model(chosen: dict[str, Method], case_file: cases.CaseFile, *, lm: Optional[LoadedModel] = None,
               device: Optional[str] = None) -> tuple[Optional[LoadedModel], dict[str, int]]:
    """The model that built the cases, when a method needs hidden states (``lm`` when given,
    else loaded), or None, and each such method's hidden layer for that model (a
    layer left to the structure rule resolved from the model's depth); an InputError for
    another revision or a layer the model does not have."""
    wanted = {m: method.estimator for m, method in chosen.items() if method.estimator.needs_hidden}
    if not wanted:
        return None, {}
    lm = lm or load(case_file.model, device=device)
    if lm.revision != case_file.revision:
        raise InputError(f"cases were built with {case_file.model} revision '{case_file.revision}', but the model "
                         f"loaded now is revision '{lm.revision}'", path=str(case_file.path))
    count = hidden_state_count(lm)
    layers = {m: est.hidden_layer(count - 1) for m, est in wanted.items()}
    for layer in sorted(set(layers.values())):
        if not -count <= layer < count:
            raise InputError(f"layer {layer} does not exist in {lm.name} (it has {count} hidden states, layers "
                             f"{-count} to {count - 1}): methods need hidden states of layer {layer}",
                             path=str(case_file.path), field="methods")
    return lm, layers


def prepare(chosen: dict[str, Method], case_file: cases.CaseFile, *, critics: Optional[Sequence[str | Path]] = None,
            bound: Optional[dict] = None, lm: Optional[LoadedModel] = None, device: Optional[str] = None,
            todo: Optional[Sequence[dict]] = None, progress: bool = True, protocol: str = "leak-free") -> Setup:
    """The :class:`Setup` of ``chosen`` on the cases of ``case_file``: critics
    matched from the ``critics`` folders (``bound``: matched already, by
    :func:`open_critics`), the model loaded and layers resolved
    (:func:`open_model`), the store of the hidden states of the groups of the cases ``todo``
    will score (default: every case; :class:`GroupStates`), and every cross-fitted method fitted
    over the folds of the cases' problems (:func:`hista.sveb.fits.open_fits`, whose pass reads
    each group through the model once, into the store); ``protocol``, how each case's group is
    shown to the methods (:data:`hista.sveb.cases.PROTOCOLS`). Raises what those raise. Close
    the store (``setup.states.close()``) when done."""
    if protocol not in cases.PROTOCOLS:
        raise InputError(f"unknown protocol {protocol!r}; valid: {', '.join(cases.PROTOCOLS)}", field="--protocol")
    if bound is None:
        bound = open_critics(chosen, critics, case_file, device=device)
    lm, layers = open_model(chosen, case_file, lm=lm, device=device)
    setup = Setup(case_file, chosen, lm, layers, bound, protocol=protocol)
    setup.states = GroupStates(lm, setup.hidden_layers(), case_file.path,
                               case_file.records if todo is None else todo)
    estimators = {m: method.estimator for m, method in chosen.items()}
    setup.fits = fits.open_fits(estimators, layers, case_file, lambda record, wanted: setup.states.read(record),
                                cases.group_of, progress=progress)
    return setup


def open_critics(chosen: dict[str, Method], folders: Optional[Sequence[str | Path]], case_file: cases.CaseFile, *,
                 device: Optional[str] = None) -> dict:
    """Method -> the critic set (:class:`hista.sveb.critics.CriticSet`) of every method that
    reads a trained critic (SPEC §4.5), from the ``--critic`` ``folders`` (each a folder
    written by ``hista critic train``, or a folder of such folders), matched by mode and λ and
    checked against the cases: an InputError for a critic of another model or revision, a
    PPO-N critic trained on other rollouts than the cases', a PPO-1 critic whose folds do not
    cover a case's problem, or a method no folder (or several) serves. The critics load on
    ``device`` when first used and share the work of their frozen layers. Empty when no
    method reads a critic (an InputError when ``folders`` were given all the same: a flag
    that would do nothing)."""
    wanted = {m: method.critic for m, method in chosen.items() if method.critic is not None}
    if not wanted:
        if folders:
            raise InputError(f"critic folders were given ({', '.join(map(str, folders))}), but no method reads a "
                             "critic (ppo-1?lam=..., ppo-n?lam=...)", field="--critic")
        return {}
    from ..critic.fit import FrozenFeatures
    from . import critics as store

    shared = FrozenFeatures(keep_prompts=2)  # the critics read one group at a time: its frozen layers run once
    sets = [s for folder in folders or [] for s in store.discover(folder, device=device, features=shared)]
    bound = {m: store.match(sets, m, need) for m, need in wanted.items()}
    for critic_set in {id(s): s for s in bound.values()}.values():
        critic_set.check_cases(case_file)
    return bound


def evaluate_case(record: dict, setup: Setup) -> CaseRow:
    """The result row of one case (:class:`hista.sveb.rows.CaseRow`): ``case_id``, ``problem``
    (the case file's problem of the case, :func:`hista.sveb.cases.problems_of`), ``field``,
    ``target``, ``group_mean`` (of
    the group as the protocol shows it: under ``"leak-free"`` the mean of the other rollouts'
    rewards), ``continuations``, ``state``, ``length`` (completion tokens of the state's
    rollout), ``values`` (method -> value at the state, the group shown as ``setup.protocol``
    says, :func:`hista.sveb.cases.group_of`), ``leak`` (method -> |ΔV| at the state when its own
    rollout's reward is flipped, the whole group shown: 0 for a valid baseline, 1/G for the group
    mean; :func:`hista.estimators.leakage.reward_leak`) and, for methods that resolve their
    structure per group (Hista's default profile), ``structure`` (method -> the values used, e.g.
    ``{"interval": 10, "stride": 1}``). The hidden states of every layer the methods need
    come from one forward pass, which the cases of one group of rollouts (the states of one
    problem) and the fits share through ``setup.states`` (:class:`GroupStates`). A method that
    reads a critic gets the one of ``setup.critics`` that scores the case's problem, a
    cross-fitted one the fit of ``setup.fits`` without the case's fold. An InputError names a
    method that fails or gives a value beyond what a results file holds."""
    path, layers = setup.case_file.path, setup.hidden_layers()
    if not layers:
        hidden = {}
    elif setup.states is not None:
        hidden = setup.states.take(record)
    else:
        hidden = _hidden(record, setup.lm, layers, path)
    # per hidden layer in use (None: without hidden states): the group shown and the whole group
    shown = {layer: cases.group_of(record, hidden.get(layer), protocol=setup.protocol)
             for layer in [None, *layers]}
    whole = shown if setup.protocol == "paper" else {layer: cases.group_of(record, hidden.get(layer))
                                                     for layer in [None, *layers]}
    state = State(rollout=record["state"]["rollout"], t=record["state"]["t"])
    values, leak, structure = {}, {}, {}
    for m, method in setup.methods.items():
        layer = setup.layers.get(m)
        try:
            est = setup.fits[m].for_case(record) if m in setup.fits else method.estimator
            if m in setup.critics:
                est.use_critic(setup.critics[m].for_case(record))
            values[m] = float(est.state_values(shown[layer], [state])[0])
            leak[m] = float(reward_leak(est, whole[layer], [state])[0])
            resolved = est.resolved(shown[layer])
            if resolved:
                structure[m] = resolved
        except Exception as exc:  # any failure of a method is the method's, named as such
            raise InputError(f"method {m!r} failed on case {record['key']}: {type(exc).__name__}: {exc}",
                             path=str(path), field="methods") from None
        if math.isfinite(values[m]) and abs(values[m]) > MAX_VALUE:  # NaN and inf are stored as null
            raise InputError(f"method {m!r} gave the value {values[m]!r} on case {record['key']}, beyond "
                             f"the {MAX_VALUE:g} a results file holds", path=str(path), field="methods")
    return CaseRow(case_id=record["key"], problem=setup.case_file.problem(record), field=record["field"],
                   target=record["target"], group_mean=float(shown[None].rewards.mean()),
                   continuations=tuple(record["continuations"]), state=RowState(state.rollout, state.t),
                   length=len(record["rollouts"][state.rollout]["completion_ids"]), values=values, leak=leak,
                   structure=structure)


def evaluate(path: str | Path, methods: Sequence[str] = DEFAULT_METHODS, *, model: Optional[str] = None,
             lm: Optional[LoadedModel] = None, device: Optional[str] = None, progress: bool = True,
             n_boot: int = 2000, critics: Optional[Sequence[str | Path]] = None,
             protocol: str = "leak-free") -> dict:
    """Evaluate ``methods`` on every case of the file ``path``, each case's group shown
    as ``protocol`` says (:data:`hista.sveb.cases.PROTOCOLS`; ``"paper"`` reproduces tables made
    before issue 63); returns the results dict (``protocol``, settings, ``methods``: spec ->
    :meth:`hista.sveb.methods.Method.record`, ``labels``,
    per-case rows of :func:`evaluate_case`, the per-field ``summary`` and the ``paired``
    comparison with GRPO of :func:`hista.sveb.paired.paired_summary`, ``leak`` (method -> the
    mean over cases of the row's ``leak``), ``segments`` (the credit each method gives the tokens
    between two states of one rollout, :func:`hista.sveb.segments.segment_summary`), the rank
    metrics of :func:`hista.sveb.ranks.rank_summary` (``ranks``); ``critics``, method ->
    the critic it read, when a method reads one;
    ``layers``, method -> the hidden layer it read; ``fits``, method -> its folds, for a
    cross-fitted method). Hidden states of every layer the methods need come from one forward
    pass per group of rollouts, shared by its cases and the fits (:class:`GroupStates`); methods
    that read a trained critic (``ppo-1``, ``ppo-n``) find it among the ``critics`` folders
    (:func:`open_critics`); cross-fitted methods (``probe``) are fitted first, fold by fold
    (:func:`prepare`). Raises an InputError, before any output is written,
    for a bad line, a model mismatch, a method that is invalid or fails on a case (naming the
    method), a missing or mismatched critic."""
    case_file = cases.read_cases(path, model)
    methods = list(methods)
    chosen = build_methods(methods, critics=bool(critics))
    setup = prepare(chosen, case_file, critics=critics, lm=lm, device=device, progress=progress, protocol=protocol)
    try:
        rows = [evaluate_case(record, setup)
                for record in tqdm(case_file.records, desc="sveb eval", unit="case", disable=not progress)]
    finally:
        setup.states.close()
    try:
        summary = metrics.summarise(rows, methods, n_boot=n_boot)
    except (ValueError, OverflowError) as exc:  # e.g. an MCS@n row too costly to enumerate exactly
        raise InputError(f"cannot summarise the cases: {exc}", path=str(path)) from None
    comparison = paired.paired_summary(rows, methods, n_boot=n_boot, seed=summary["seed"])
    rank_metrics = ranks.rank_summary(rows, methods, n_boot=n_boot, seed=summary["seed"])
    return {
        "hista_version": __version__,
        "code": provenance.code(),
        "cases_file": str(path),
        "protocol": protocol,
        "settings": case_file.settings,
        "methods": {m: method.record() for m, method in chosen.items()},
        "labels": {m: method.label for m, method in chosen.items()},
        "cases": rows,
        "summary": summary,
        "paired": comparison,
        "leak": metrics.leak_summary(rows, methods),
        "segments": segments.segment_summary(rows, methods, n_boot=n_boot, seed=summary["seed"]),
        "ranks": rank_metrics,
        **({"critics": {m: c.describe() for m, c in setup.critics.items()}} if setup.critics else {}),
        **({"layers": setup.layers} if setup.layers else {}),
        **({"fits": {m: fit.describe() for m, fit in setup.fits.items()}} if setup.fits else {}),
    }


#: bytes of hidden states :class:`GroupStates` keeps in memory; the rest waits in a temporary folder
MEMORY_BUDGET = 4 << 30


class GroupStates:
    """The hidden states of the case groups' rollouts, each group read through the model once per
    ``sveb eval`` or sweep (issue 66): a cross-fitted method's fit pass reads every group first
    (:meth:`read`), and scoring reads them again (:meth:`take`). A group's states are kept from
    the first read until the last of ``records`` that uses them is scored, then dropped: in
    memory up to :data:`MEMORY_BUDGET` bytes, beyond it in a temporary folder that :meth:`close`
    removes (a killed run leaves it to the system's temporary-file cleanup; nothing of it is
    resumed). A group the store does not hold is read when asked for; one that no case of
    ``records`` uses is not kept."""

    def __init__(self, lm: Optional[LoadedModel], layers: list[int], path: str | Path, records: Sequence[dict]):
        self.lm, self.layers, self.path = lm, list(layers), path
        self.uses = Counter(self._key(r) for r in records)  # cases left to score, per group
        self.kept: dict[tuple, dict] = {}
        self.on_disk: dict[tuple, Path] = {}
        self.bytes = 0
        self.folder: Optional[tempfile.TemporaryDirectory] = None

    @staticmethod
    def _key(record: dict) -> tuple:
        return tuple(record["prompt_ids"]), tuple(tuple(r["completion_ids"]) for r in record["rollouts"])

    def read(self, record: dict) -> dict[int, list]:
        """The group's states (layer -> one tensor per rollout), kept for its cases."""
        key = self._key(record)
        hidden = self._stored(key)
        if hidden is None:
            hidden = _hidden(record, self.lm, self.layers, self.path)
            if self.uses[key] > 0:
                self._keep(key, hidden)
        return hidden

    def take(self, record: dict) -> dict[int, list]:
        """The group's states for scoring one of its cases; dropped after its last case."""
        key = self._key(record)
        hidden = self.read(record)
        self.uses[key] -= 1
        if self.uses[key] <= 0:
            self._drop(key)
        return hidden

    def close(self) -> None:
        """Drop every group and remove the temporary folder."""
        self.kept.clear()
        self.on_disk.clear()
        self.bytes = 0
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None

    def _stored(self, key: tuple) -> Optional[dict]:
        if key in self.kept:
            return self.kept[key]
        if key in self.on_disk:
            return torch.load(self.on_disk[key], weights_only=True)
        return None

    def _keep(self, key: tuple, hidden: dict) -> None:
        size = _size(hidden)
        if self.bytes + size <= MEMORY_BUDGET:
            self.kept[key] = hidden
            self.bytes += size
            return
        if self.folder is None:
            self.folder = tempfile.TemporaryDirectory(prefix="hista-sveb-states-")
        self.on_disk[key] = Path(self.folder.name) / f"{len(self.on_disk)}.pt"
        torch.save(hidden, self.on_disk[key])

    def _drop(self, key: tuple) -> None:
        hidden = self.kept.pop(key, None)
        if hidden is not None:
            self.bytes -= _size(hidden)
        path = self.on_disk.pop(key, None)
        if path is not None:
            path.unlink()


def _size(hidden: dict[int, list]) -> int:
    """Bytes of a group's hidden states (layer -> one tensor per rollout)."""
    return sum(t.numel() * t.element_size() for rows in hidden.values() for t in rows)


def _hidden(record: dict, lm: LoadedModel, layers: list[int], path: str | Path) -> dict[int, list]:
    """Hidden states of ``layers`` (layer -> one tensor per rollout) for prompt + completion of
    every stored rollout of a case, from one forward pass."""
    stored = record["rollouts"]
    try:
        return hidden_states(lm, [record["prompt_ids"]] * len(stored), [r["completion_ids"] for r in stored],
                             layers=layers)
    except IndexError as exc:
        raise InputError(f"{exc}: methods need hidden states of layers {layers}", path=str(path),
                         field="methods") from None
