"""Training PPO critics on SVEB cases (SPEC §4.5): ``hista critic train``. PPO-N is one critic
on every distinct group of the cases; PPO-1 is k seeded folds by problem, critic f training on
the problems outside fold f and scoring fold f, saved as critic folders plus, for PPO-1, the
index ``folds.json`` (:mod:`hista.sveb.critics` reads them back). The fitting itself is
:func:`hista.critic.fit.fit`."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path
from typing import Optional, Sequence

from .. import __version__, provenance
from ..critic.config import CPU_LAYERS, FitConfig
from ..critic.fit import FrozenFeatures, default_layers, fit
from ..critic.model import CONFIG, ValueModel, check_layers
from ..errors import InputError
from ..jsonio import write_json_atomic
from ..models.forward import decoder_layers
from ..types import RolloutGroup
from .cases import CaseFile, fold_problems, read_cases
from .critics import FOLDS, FOLDS_FORMAT, MODES, case_groups, check_trained
from .presets import DEFAULT_FOLDS

__all__ = ["train_critics", "CPU_LAYERS", "DEFAULT_FOLDS"]


REQUEST, REQUEST_FORMAT = "train.json", "hista-critic-train/1"


#: request fields that do not tell requests apart: the cases are the same when their rollouts
#: are (``groups``), whatever path names them
_NOT_IDENTITY = ("cases",)


def _check_out(out: Path, request: dict) -> bool:
    """Whether ``out`` may take the critics of ``request``: True for a new or empty folder (the
    request is to be written), False for a folder holding the same request (resumed: its
    finished critics are kept); otherwise an InputError naming the folder or the field that
    differs. The cases are compared by content (the digest ``groups`` of their rollouts), not
    by the path they were given as."""
    from ..jsonio import check_output_dir, loads

    check_output_dir(out)
    recorded = out / REQUEST
    if recorded.is_file():
        try:
            text = recorded.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"is not UTF-8 JSON ({exc.reason} at byte {exc.start}): not a critic training request",
                             path=str(recorded)) from None
        except OSError as exc:
            raise InputError(f"cannot read it ({exc.strerror or exc})", path=str(recorded)) from None
        before = loads(text, path=str(recorded))
        if not isinstance(before, dict) or before.get("format") != REQUEST_FORMAT:
            raise InputError(f"is not a critic training request (format {REQUEST_FORMAT!r} expected)",
                             path=str(recorded), field="format")
        if before.get("groups") != request.get("groups"):
            raise InputError(f"holds critics of other cases (their rollouts differ from those of "
                             f"{request.get('cases')}); use a new --out", path=str(recorded), field="groups")
        for key in sorted(set(before) | set(request)):
            if key in _NOT_IDENTITY:
                continue
            if before.get(key) != request.get(key):
                raise InputError(f"holds critics of another request ({key}: {before.get(key)!r} there, "
                                 f"{request.get(key)!r} now); use a new --out", path=str(recorded), field=key)
        return False
    if out.exists() and any(out.iterdir()):
        raise InputError("is not empty; critics are written into a new or empty folder (or one an interrupted "
                         "hista critic train of the same request left)", path=str(out), field="--out")
    return True


def _as_list(value, kind) -> list:
    return [kind(v) for v in value] if isinstance(value, (list, tuple)) else [kind(value)]


def train_critics(cases_path: str | Path, out: str | Path, *, mode: str | Sequence[str],
                  lam: float | Sequence[float], folds: Optional[int] = None, layers: Optional[int] = None,
                  fit_config: Optional[FitConfig] = None, model: Optional[str] = None,
                  device: Optional[str] = None, progress: bool = True) -> dict:
    """Train the critics of ``mode`` and ``lam`` (one each, or lists: every pair) on the
    rollouts of the case file ``cases_path`` into the folder ``out`` (SPEC §4.5):

    - ``ppo-n``: one critic on every distinct group of the cases;
    - ``ppo-1``: ``folds`` seeded folds of the problems (:func:`hista.sveb.cases.fold_problems`,
      seed ``fit_config.seed``; None: :data:`DEFAULT_FOLDS`, or one per problem when fewer);
      the critic of fold f trains on the problems outside it and scores only fold f's cases;
      written to ``fold-f`` with ``folds.json`` mapping each problem to its fold.

    One pair is written to ``out`` itself, several to ``out/{mode}-{λ}``; they share one
    backbone and its frozen layers' work (:class:`FrozenFeatures`). ``out/train.json`` records
    the request (the cases by their rollouts, not their path): rerunning an interrupted
    request resumes it, keeping the critics already written after checking each wholly
    (:func:`hista.sveb.critics.check_trained`) and against the request (mode, λ, policy,
    fold, training problems, backbone, layers). The backbone is ``model`` (default: the model
    that built the cases, at the same revision), the last ``layers`` decoder layers train
    (None: :func:`default_layers`), the head starts at the mean reward of the critic's
    training rollouts. Each critic's
    ``critic.json`` records the policy, λ, γ = 1, the mode, its fold, the training data (cases
    file, its settings, problems and group digests trained on) and the losses. Returns {"out",
    "critics": [{"path", "mode", "lam", "problems", "losses", "seconds"}]}. An InputError
    (before anything is trained) for a bad mode, an ``out`` holding anything else or a damaged
    critic, too few problems for ``folds``, a backbone of another revision or whose
    vocabulary does not hold the cases' tokens."""
    modes, lams, config = _checked_request(mode, lam, fit_config)
    out = Path(out)
    case_file = read_cases(cases_path)
    groups = case_groups(case_file.records)
    problems = sorted(set(case_file.problems.values()))  # a fold holds out every case of its questions
    folds = _folds(modes, folds, problems, case_file) if "ppo-1" in modes else folds
    pairs = [(m, value) for m in modes for value in lams]
    request = {"format": REQUEST_FORMAT, "cases": str(cases_path),
               "groups": hashlib.sha256("".join(d for _, d, _ in groups).encode()).hexdigest()[:16],
               "modes": modes, "lams": lams, "folds": folds if "ppo-1" in modes else None, "layers": layers,
               "model": model,
               "fit": {k: v for k, v in dataclasses.asdict(config).items() if k != "lam"}}
    new = _check_out(out, request)
    policy = {"model": case_file.model, "revision": case_file.revision}
    plans = [_plan(m, value, out if len(pairs) == 1 else out / f"{m}-{value:g}", folds, case_file.problems,
                   config.seed) for m, value in pairs]
    kept = {} if new else _kept(plans, groups, policy)  # every kept critic checked before anything trains
    lm = _backbone(model, case_file, device)
    layers = default_layers(lm.device) if layers is None else layers
    _check_backbone_of_kept(kept, lm, layers)
    if new:
        write_json_atomic(out / REQUEST, request)

    features = FrozenFeatures()
    written = []
    for m, value, root, plan in plans:
        base = {"policy": policy, "mode": m, "lam": value, "gamma": 1.0}
        for path, fold in plan:
            if path in kept:  # written by an interrupted run of this request
                info = kept[path]["training"]
                written.append({"path": str(path), "mode": m, "lam": value, "problems": info["problems"],
                                "losses": info["losses"], "seconds": info["seconds"], "resumed": True})
                continue
            written.append(_train_one(lm, layers, groups, fold, folds, dataclasses.replace(config, lam=value), base,
                                      path, case_file, features, progress))
        if m == "ppo-1":
            index = {"format": FOLDS_FORMAT, "hista_version": __version__, "code": provenance.code(), **base,
                     "folds": folds,
                     "seed": config.seed, "cases": str(cases_path), "dirs": [p.name for p, _ in plan],
                     "problems": {p: f["index"] for _, f in plan for p in f["scores"]}}
            write_json_atomic(root / FOLDS, index)
    return {"out": str(out), "critics": written}


def _checked_request(mode: str | Sequence[str], lam: float | Sequence[float], fit_config: Optional[FitConfig]
                     ) -> tuple[list[str], list[float], FitConfig]:
    """The modes, λs and fit configuration of a request, each mode and λ checked before any file is read."""
    modes, lams = _as_list(mode, str), _as_list(lam, float)
    for m in modes:
        if m not in MODES:
            raise InputError(f"unknown critic mode {m!r}; valid: {', '.join(MODES)}", field="--mode")
    config = fit_config or FitConfig()
    for value in lams:
        dataclasses.replace(config, lam=value)  # checks the range
    return modes, lams, config


def _folds(modes: Sequence[str], folds: Optional[int], problems: Sequence[str], case_file: CaseFile) -> int:
    """PPO-1's number of folds (None: DEFAULT_FOLDS, or one per problem when fewer), each fold
    holding at least one of the cases' problems."""
    if folds is None and len(problems) < 2:
        raise InputError(f"the cases hold {len(problems)} problem: PPO-1 needs at least 2 problems, one per fold "
                         "(its critics each hold one fold of problems out of training)", path=str(case_file.path),
                         field="--folds")
    folds = min(DEFAULT_FOLDS, len(problems)) if folds is None else folds
    if folds < 2:
        raise InputError(f"PPO-1 needs at least 2 folds, got {folds}", field="--folds")
    if folds > len(problems):
        raise InputError(f"{folds} folds but the cases hold {len(problems)} problems: PPO-1 needs a problem in "
                         "every fold", path=str(case_file.path), field="--folds")
    return folds


def _plan(m: str, value: float, root: Path, folds: Optional[int], problem: dict[str, str], seed: int) -> tuple:
    """(mode, λ, root, [(critic folder, fold or None)]): PPO-1's folds of the problems under
    ``root``, each scoring the problem ids of its problems (``problem``: id -> problem), PPO-N's
    one critic at it."""
    if m == "ppo-1":
        fold_of = {p: f for f, fold in enumerate(fold_problems(sorted(set(problem.values())), folds, seed))
                   for p in fold}
        plan = [(root / f"fold-{f}", {"index": f, "folds": folds, "seed": seed,
                                      "scores": sorted(pid for pid, p in problem.items() if fold_of[p] == f)})
                for f in range(folds)]
    else:
        plan = [(root, None)]
    return m, value, root, plan


def _backbone(model: Optional[str], case_file: CaseFile, device: Optional[str]):
    """The critics' backbone: ``model``, or the model that built the cases at their revision, whose
    vocabulary holds the cases' tokens."""
    from ..models import load

    lm = load(model or case_file.model, device=device)
    if lm.name == case_file.model and lm.revision != case_file.revision:
        raise InputError(f"cases were built with {case_file.model} revision '{case_file.revision}', but the model "
                         f"loaded now is revision '{lm.revision}'", path=str(case_file.path))
    _check_vocabulary(lm, case_file.records, case_file.path)
    return lm


def _check_backbone_of_kept(kept: dict, lm, layers: Optional[int]) -> None:
    """The trained layers checked against the backbone, and every kept critic against this run's
    backbone and trained layers, before anything is written."""
    count = decoder_layers(lm.model.base_model)
    if layers is not None:
        check_layers(layers, count, field="--layers")
    ours = {"backbone": {"model": lm.name, "revision": lm.revision},
            "layers_trained": count if layers is None else layers}
    for path, info in kept.items():
        for key, want in ours.items():
            if (have := info[key]) != want:
                raise InputError(f"this critic has {key} {have!r}, but this request's critic here has {want!r}; "
                                 f"remove the folder {path} to train it again", path=str(path / CONFIG), field=key)


def _train_one(lm, layers: Optional[int], groups: Sequence[tuple[str, str, RolloutGroup]], fold: Optional[dict],
               folds: Optional[int], fitted: FitConfig, base: dict, path: Path, case_file: CaseFile,
               features: FrozenFeatures, progress: bool) -> dict:
    """Fit one critic on the groups outside ``fold`` (all of them for PPO-N), save it to ``path``
    with what it was trained on, and return its entry of the written list."""
    held = set(fold["scores"]) if fold else set()
    train = [(p, d, g) for p, d, g in groups if p not in held]
    rewards = [r.reward for _, _, g in train for r in g.rollouts]
    critic = ValueModel.from_policy(lm, layers=layers, init_value=sum(rewards) / len(rewards))
    desc = f"critic {base['mode']} λ={base['lam']:g}" + (f" fold {fold['index'] + 1}/{folds}" if fold else "")
    start = time.time()
    losses = fit(critic, [g for _, _, g in train], fitted, progress=progress, desc=desc, features=features)
    seconds = time.time() - start
    critic.info.update(base, fold=fold, training={
        "cases": str(case_file.path), "settings": case_file.settings,
        "problems": sorted({p for p, _, _ in train}), "groups": {p: d for p, d, _ in train},
        "rollouts": len(rewards), "fit": dataclasses.asdict(fitted), "init_value": sum(rewards) / len(rewards),
        "losses": losses, "seconds": round(seconds, 1)})
    critic.save_pretrained(path)
    return {"path": str(path), "mode": base["mode"], "lam": base["lam"],
            "problems": critic.info["training"]["problems"], "losses": losses, "seconds": seconds}


def _kept(plans: Sequence[tuple], groups: Sequence[tuple[str, str, RolloutGroup]], policy: dict) -> dict:
    """Path -> ``critic.json`` record of each critic an interrupted run of the request left
    (a folder with its ``critic.json``; SPEC §4.5), each checked wholly
    (:func:`hista.sveb.critics.check_trained`: every file, its fields) and against the plan: its
    mode, λ, policy, fold, and the problems and groups it was to train on (so a PPO-1 critic
    never scores a problem it trained on). An InputError names the file and field."""
    kept = {}
    for m, value, _, plan in plans:
        for path, fold in plan:
            if not ((path / CONFIG).exists() or (path / CONFIG).is_symlink()):
                continue  # not written yet (or interrupted before its critic.json, written last): trained again
            info = check_trained(path)
            where = str(path / CONFIG)
            held = set(fold["scores"]) if fold else set()
            train = {p: d for p, d, _ in groups if p not in held}
            expected = {"mode": m, "lam": value, "policy": policy, "fold": fold}
            for key, want in expected.items():
                if info.get(key) != want:
                    raise InputError(f"this critic has {key} {info.get(key)!r}, but this request's critic here has "
                                     f"{want!r}; remove the folder {path} to train it again", path=where, field=key)
            if info["training"]["groups"] != train:
                raise InputError(f"this critic was trained on other problems or rollouts than this request's "
                                 f"critic here ({len(info['training']['groups'])} problems, {len(train)} expected); "
                                 f"remove the folder {path} to train it again", path=where, field="training.groups")
            kept[path] = info
    return kept


def _check_vocabulary(lm, records: Sequence[dict], path: str | Path) -> None:
    """An InputError when a token id of the cases lies outside the backbone's vocabulary."""
    size = int(lm.model.base_model.get_input_embeddings().num_embeddings)
    top = max(max(r["prompt_ids"] + [t for x in r["rollouts"] for t in x["completion_ids"]]) for r in records)
    if top >= size:
        raise InputError(f"the cases hold token id {top}, beyond the vocabulary of {lm.name} ({size} tokens): "
                         "the critic's backbone must share the policy's tokenizer", path=str(path), field="--model")

