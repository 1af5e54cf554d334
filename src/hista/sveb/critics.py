"""PPO critics of SVEB cases (SPEC §4.5): the distinct groups of rollouts a case file trains
on, and finding the critic that scores a case (``sveb eval --critic DIR``).

A trained folder is either one critic (``critic.json``; PPO-N) or a cross-fitted set
(``folds.json`` plus one critic folder per fold; PPO-1). :class:`CriticSet` reads either,
checks it against the cases it is to score, and hands out the critic of a case's problem
(loaded once, on first use)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, NoReturn, Optional, Sequence

from ..critic.model import CONFIG, REWRITE, ValueModel, check_folder
from ..errors import InputError
from ..jsonio import loads
from ..types import Rollout, RolloutGroup
from .cases import CaseFile, problem_of

MODES = ("ppo-1", "ppo-n")
FOLDS = "folds.json"
FOLDS_FORMAT = "hista-critic-folds/1"


def group_digest(record: dict) -> str:
    """A fingerprint of a case's group of rollouts (prompt ids, completion ids, rewards; SPEC
    §4.5): PPO-N checks with it that its critic was trained on the cases' own rollouts."""
    data = [record["prompt_ids"], [[r["completion_ids"], r["reward"]] for r in record["rollouts"]]]
    return hashlib.sha256(json.dumps(data, separators=(",", ":")).encode()).hexdigest()[:16]


def case_groups(records: Sequence[dict]) -> list[tuple[str, str, RolloutGroup]]:
    """The distinct groups of rollouts of a case file's records, in file order, as (problem,
    digest, group) (SPEC §4.5); the states of one problem share their group, which appears once."""
    seen: set[str] = set()
    out = []
    for record in records:
        digest = group_digest(record)
        if digest in seen:
            continue
        seen.add(digest)
        rollouts = [Rollout(record["prompt_ids"], r["completion_ids"], r["reward"]) for r in record["rollouts"]]
        problem = problem_of(record["key"])
        out.append((problem, digest, RolloutGroup(rollouts, prompt_id=problem)))
    return out



def _lam_text(lam: float) -> str:
    """λ as messages and folder names show it (``0.95``, ``1``)."""
    return f"{lam:g}"


class CriticSet:
    """The critics of one ``hista critic train`` output folder (SPEC §4.5): ``mode``
    (``ppo-1``/``ppo-n``), ``lam``, ``policy`` (the model and revision whose rollouts trained
    it) and, for PPO-1, which fold's critic scores each problem. Critics load on ``device``
    (default: cuda when available) and share ``features`` (:class:`hista.critic.fit.FrozenFeatures`)."""

    def __init__(self, folder: str | os.PathLike, *, device: Optional[str] = None, features: Any = None):
        self.folder, self.device, self.features = Path(folder), device, features
        self._loaded: dict[str, ValueModel] = {}
        if (self.folder / FOLDS).is_file():
            self._read_folds()
        elif (self.folder / CONFIG).is_file():
            info = check_trained(self.folder)
            self._where = str(self.folder / CONFIG)
            self.mode, self.lam, self.policy = self._identity(info, self._where)
            self.members = {".": info}
            self.fold_of: Optional[dict[str, str]] = None
        else:
            raise InputError(f"is not a critic folder (no {CONFIG} or {FOLDS}); write one with hista critic train",
                             path=str(self.folder))

    @staticmethod
    def _identity(record: dict, where: str) -> tuple[str, float, dict]:
        """A critic record's mode, λ and policy, checked (an InputError names ``where`` and the field)."""
        mode, lam, policy = record.get("mode"), record.get("lam"), record.get("policy")
        if mode not in ("ppo-1", "ppo-n"):
            raise InputError(f"expected 'ppo-1' or 'ppo-n', got {mode!r}", path=where, field="mode")
        if isinstance(lam, bool) or not isinstance(lam, (int, float)):
            raise InputError(f"expected a number, got {lam!r}", path=where, field="lam")
        if not (isinstance(policy, dict) and isinstance(policy.get("model"), str)
                and isinstance(policy.get("revision"), str)):
            raise InputError("expected {'model': ..., 'revision': ...}", path=where, field="policy")
        return mode, float(lam), policy

    def _read_folds(self) -> None:
        """Read ``folds.json`` and each fold's ``critic.json``, and check that no fold's critic
        trained on a problem that fold scores."""
        where = str(self.folder / FOLDS)
        try:
            index = loads((self.folder / FOLDS).read_text(encoding="utf-8"), path=where)
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read it ({exc})", path=where) from None
        if not isinstance(index, dict) or index.get("format") != FOLDS_FORMAT:
            raise InputError(f"is not a critic fold index (format {FOLDS_FORMAT!r} expected)", path=where)
        self._where = where
        self.mode, self.lam, self.policy = self._identity(index, where)
        dirs, problems = index.get("dirs"), index.get("problems")
        if not (isinstance(dirs, list) and dirs and all(isinstance(d, str) and d and "/" not in d and d != ".."
                                                        for d in dirs)):
            raise InputError("expected a list of fold folder names", path=where, field="dirs")
        if not (isinstance(problems, dict) and all(isinstance(f, int) and 0 <= f < len(dirs)
                                                   for f in problems.values())):
            raise InputError(f"expected problem -> fold index (0 to {len(dirs) - 1})", path=where, field="problems")
        self.members = {d: check_trained(self.folder / d) for d in dirs}
        self.fold_of = {p: dirs[f] for p, f in problems.items()}
        for k, (d, info) in enumerate(self.members.items()):
            mode, lam, policy = info["mode"], float(info["lam"]), info["policy"]
            if (mode, lam, policy) != (self.mode, self.lam, self.policy):
                raise InputError(f"fold {d} holds a {mode} critic with lam={_lam_text(lam)} of {policy}, not the "
                                 f"{self.mode} critic with lam={_lam_text(self.lam)} of {self.policy} the index names",
                                 path=where)
            scored = sorted(p for p, member in self.fold_of.items() if member == d)
            if info["fold"]["index"] != k or sorted(info["fold"]["scores"]) != scored:
                raise InputError(f"the critic in {d} is fold {info['fold']['index']} scoring "
                                 f"{len(info['fold']['scores'])} problems, but the index makes it fold {k} scoring "
                                 f"{len(scored)}", path=str(self.folder / d / CONFIG), field="fold")
            trained = set(info["training"]["problems"])
            seen = [p for p in scored if p in trained]
            if seen:
                raise InputError(f"the critic of fold {d} scores problem {seen[0]!r} but was trained on it: PPO-1 "
                                 "critics must never see the problems they score", path=where)

    def describe(self) -> dict:
        """What a results file records about the critic (SPEC §8: every result records its
        configuration): folder, mode, λ, policy, and the folds for PPO-1."""
        out = {"folder": str(self.folder), "mode": self.mode, "lam": self.lam, "policy": self.policy}
        if self.fold_of is not None:
            out["folds"] = sorted(self.members)
        return out

    def check_cases(self, case_file: CaseFile) -> None:
        """An InputError unless this critic may score the cases (SPEC §4.5): trained on rollouts
        of the model and revision that built them; for PPO-N, trained on the cases' own groups
        of rollouts; for PPO-1, with a fold that scores each case's problem and holds every case
        of that problem (:func:`hista.sveb.cases.problems_of`)."""
        model, revision = case_file.model, case_file.revision
        if (self.policy["model"], self.policy["revision"]) != (model, revision):
            raise InputError(f"this critic was trained on rollouts of {self.policy['model']} revision "
                             f"'{self.policy['revision']}', but the cases {case_file.path} were built with {model} "
                             f"revision '{revision}'", path=self._where, field="policy")
        problems = {problem_of(r["key"]): r for r in case_file.records}
        if self.fold_of is not None:
            missing = sorted(p for p in problems if p not in self.fold_of)
            if missing:
                raise InputError(f"its folds do not cover {len(missing)} of the cases' {len(problems)} problems "
                                 f"(e.g. {missing[0]!r}): train the PPO-1 critics on these cases", path=self._where,
                                 field="problems")
            folds: dict[str, set[int]] = {}  # a problem -> the folds of its problem ids
            for pid, problem in case_file.problems.items():
                folds.setdefault(problem, set()).add(self.fold_of[pid])
            torn = sorted(p for p, held in folds.items() if len(held) > 1)
            if torn:
                raise InputError(f"its folds put cases that share a prompt in different folds ({len(torn)} problems, "
                                 f"e.g. {torn[0]!r} and the problem ids asking the same): a critic would score a "
                                 "question it trained on; train the PPO-1 critics again on these cases",
                                 path=self._where, field="problems")
            return
        trained = (self.members["."].get("training") or {}).get("groups") or {}
        missing = sorted(p for p in problems if p not in trained)
        if missing:
            raise InputError(f"this PPO-N critic was trained on other problems than the cases': {len(missing)} of "
                             f"the cases' {len(problems)} problems (e.g. {missing[0]!r}) are not in its training data",
                             path=self._where, field="training")
        other = sorted(p for p, r in problems.items() if trained[p] != group_digest(r))
        if other:
            raise InputError(f"this PPO-N critic was trained on other rollouts of problem {other[0]!r} than the "
                             f"cases' ({len(other)} problems differ): train it on these cases", path=self._where,
                             field="training")

    def for_case(self, record: dict) -> ValueModel:
        """The critic that scores the case ``record`` (SPEC §4.5): see :meth:`for_problem`."""
        return self.for_problem(problem_of(record["key"]))

    def for_problem(self, problem: str) -> ValueModel:
        """The critic that scores ``problem`` (SPEC §4.5): the single critic, or the one of the
        fold holding the problem; loaded once."""
        member = "." if self.fold_of is None else self.fold_of.get(problem)
        if member is None:
            raise InputError(f"no fold of this PPO-1 critic scores problem {problem!r}", path=self._where)
        if member not in self._loaded:
            critic = ValueModel.from_pretrained(self.folder / member, device=self.device)
            critic.shared_features = self.features
            self._loaded[member] = critic
        return self._loaded[member]


def _fail(where: str, field: str, expected: str, value: Any) -> NoReturn:
    """Raise the InputError of a ``critic.json`` field that is not what it should be (the value shortened)."""
    shown = repr(value)
    raise InputError(f"expected {expected}, got {shown if len(shown) <= 80 else shown[:77] + '...'}", path=where,
                     field=field)


def _is_int(value: Any, low: int = 0) -> bool:
    """Whether ``value`` is an integer >= ``low`` (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (a bool is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_trained(folder: str | os.PathLike) -> dict:
    """The ``critic.json`` record of a critic folder that ``hista critic train`` wrote (SPEC
    §4.5), after checking the whole folder before any critic is trained or used: every file
    (:func:`hista.critic.model.check_folder`) and the trainer's fields, with their types:
    ``mode``, ``lam``, ``policy``, ``gamma``, ``fold`` (PPO-1: ``index``, ``folds``, ``seed``,
    ``scores``; PPO-N: null) and ``training`` (``cases``, ``settings``, ``problems``, ``groups``
    of those problems, ``rollouts``, ``losses``, ``seconds``), and that a PPO-1 critic never
    trained on a problem it scores. An InputError names the file and the field."""
    folder = Path(folder)
    info = check_folder(folder)
    where = str(folder / CONFIG)
    mode, _, _ = CriticSet._identity(info, where)
    if not _is_number(info.get("gamma")):
        _fail(where, "gamma", "a number", info.get("gamma"))
    fold = info.get("fold")
    _check_fold(where, mode, fold)
    training = info.get("training")
    _check_training(where, training)
    if mode == "ppo-1":
        seen = sorted(set(training["problems"]) & set(fold["scores"]))
        if seen:
            raise InputError(f"this critic scores problem {seen[0]!r} but was trained on it: PPO-1 critics must "
                             f"never see the problems they score; {REWRITE}", path=where, field="training.problems")
    return info


def _check_fold(where: str, mode: str, fold: Any) -> None:
    """``fold`` of a ``critic.json``: null for PPO-N; for PPO-1 its index, folds, seed and scored problems."""
    if mode == "ppo-n" and fold is not None:
        _fail(where, "fold", "null for a ppo-n critic", fold)
    if mode == "ppo-1":
        if not isinstance(fold, dict):
            _fail(where, "fold", "{'index', 'folds', 'seed', 'scores'} for a ppo-1 critic", fold)
        if not _is_int(fold.get("folds"), 2):
            _fail(where, "fold.folds", "an integer >= 2", fold.get("folds"))
        if not (_is_int(fold.get("index")) and fold["index"] < fold["folds"]):
            _fail(where, "fold.index", f"an integer from 0 to {fold['folds'] - 1}", fold.get("index"))
        if not _is_int(fold.get("seed")):
            _fail(where, "fold.seed", "an integer >= 0", fold.get("seed"))
        scores = fold.get("scores")
        if not (isinstance(scores, list) and scores and all(isinstance(p, str) for p in scores)):
            _fail(where, "fold.scores", "a list of the problems the fold scores", scores)


def _check_training(where: str, training: Any) -> None:
    """``training`` of a ``critic.json``: what the critic trained on, its losses and its seconds."""
    if not isinstance(training, dict):
        _fail(where, "training", "the record of the critic's training data (an object)", training)
    if not isinstance(training.get("cases"), str):
        _fail(where, "training.cases", "the path of the cases file", training.get("cases"))
    if not isinstance(training.get("settings"), dict):
        _fail(where, "training.settings", "the cases' settings (an object)", training.get("settings"))
    problems = training.get("problems")
    if not (isinstance(problems, list) and problems and all(isinstance(p, str) for p in problems)):
        _fail(where, "training.problems", "a list of the problems trained on", problems)
    groups = training.get("groups")
    if not (isinstance(groups, dict) and sorted(groups) == sorted(problems)
            and all(isinstance(d, str) for d in groups.values())):
        _fail(where, "training.groups", "problem -> group digest for each of training.problems", groups)
    if not _is_int(training.get("rollouts"), 1):
        _fail(where, "training.rollouts", "a positive integer", training.get("rollouts"))
    losses = training.get("losses")
    if not (isinstance(losses, list) and losses
            and all(isinstance(x, dict) and _is_int(x.get("epoch"), 1) and _is_int(x.get("tokens"))
                    and (x.get("loss") is None or _is_number(x.get("loss"))) for x in losses)):
        _fail(where, "training.losses", "a list of {'epoch', 'loss', 'tokens'}", losses)
    if not (_is_number(training.get("seconds")) and training["seconds"] >= 0):
        _fail(where, "training.seconds", "a number >= 0", training.get("seconds"))


def discover(folder: str | os.PathLike, *, device: Optional[str] = None, features: Any = None) -> list[CriticSet]:
    """The critic sets of ``folder`` (SPEC §4.5): the folder itself when ``hista critic train``
    wrote it, else each of its subfolders that it wrote (a folder of critics). An InputError
    when there is none. Their critics load on ``device`` and share ``features`` (a
    :class:`hista.critic.fit.FrozenFeatures`, or None)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("does not exist or is not a folder", path=str(folder), field="--critic")
    if (folder / FOLDS).is_file() or (folder / CONFIG).is_file():
        return [CriticSet(folder, device=device, features=features)]
    subs = sorted(p for p in folder.iterdir() if p.is_dir() and ((p / FOLDS).is_file() or (p / CONFIG).is_file()))
    if not subs:
        raise InputError(f"holds no critic ({CONFIG} or {FOLDS}, or subfolders with one); write one with hista "
                         "critic train", path=str(folder), field="--critic")
    return [CriticSet(p, device=device, features=features) for p in subs]


def match(sets: Sequence[CriticSet], method: str, requirement: dict) -> CriticSet:
    """The one critic set whose mode and λ are the method's ``requirement`` (``{"mode",
    "lam"}``; SPEC §4.5); an InputError naming what was given when none or several match."""
    mode, lam = requirement["mode"], float(requirement["lam"])
    found = [s for s in sets if s.mode == mode and abs(s.lam - lam) < 1e-9]
    if len(found) == 1:
        return found[0]
    given = "; ".join(f"{s.folder} ({s.mode}, lam={_lam_text(s.lam)})" for s in sets) or "none"
    if not found:
        raise InputError(f"method {method!r} needs a {mode} critic trained with lam={_lam_text(lam)}, and no "
                         f"--critic holds one (given: {given}); train it with hista critic train --mode {mode} "
                         f"--lam {_lam_text(lam)}", field="--critic")
    raise InputError(f"method {method!r}: several --critic folders hold a {mode} critic with lam={_lam_text(lam)}: "
                     f"{', '.join(str(s.folder) for s in found)}; name one", field="--critic")
