"""Training PPO critics on SVEB rollouts (SPEC §4.5): ``hista critic train``.

Reading order:

1. ``case_groups``    the distinct groups of rollouts of a case file (the states of one problem
                      share one group: each group is trained on once)
2. ``fit``            regression of a :class:`ValueModel` on GAE(λ) targets: MSE over completion
                      tokens, AdamW, seeded shuffling, optional PPO value clipping; for λ < 1 the
                      targets bootstrap on the critic's own values, recomputed every epoch
3. ``train_critics``  PPO-N (one critic on every group of the cases) or PPO-1 (k seeded folds
                      by problem: critic f trains on the problems outside fold f and scores fold
                      f), saved as critic folders plus, for PPO-1, the index ``folds.json``
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Optional, Sequence

import torch
from tqdm.auto import tqdm

from .. import __version__
from ..errors import InputError
from ..jsonio import write_json_atomic
from ..types import Rollout, RolloutGroup
from .model import CONFIG, ValueModel, check_layers, decoder_layers, values_by_prompt
from .targets import gae_targets

MODES = ("ppo-1", "ppo-n")
FOLDS = "folds.json"
FOLDS_FORMAT = "hista-critic-folds/1"
#: decoder layers trained on the CPU when --layers is not given (the head always trains)
CPU_LAYERS = 2
#: PPO-1's folds when none are named (one per problem when the cases hold fewer problems)
DEFAULT_FOLDS = 5


@dataclasses.dataclass
class FitConfig:
    """How a critic is fitted (SPEC §4.5): ``lam`` the GAE λ of the targets (γ = 1),
    ``epochs`` passes over the rollouts, ``lr`` AdamW's learning rate, ``batch_size``
    rollouts per optimiser step, ``value_clip`` PPO's value clipping range ε (None: off; the
    loss is then max((V − G)², (V_old + clip(V − V_old, ±ε) − G)²), V_old the values when the
    epoch's targets were computed), ``max_grad_norm`` gradient clipping, ``seed`` the
    shuffling seed."""

    lam: float = 1.0
    epochs: int = 4
    lr: float = 1e-4
    batch_size: int = 8
    value_clip: Optional[float] = None
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.lam <= 1.0:
            raise InputError(f"lam must lie in [0, 1], got {self.lam}", field="lam")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}", field=name)
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise InputError(f"lr must be a positive number, got {self.lr}", field="lr")
        if self.value_clip is not None and not self.value_clip > 0:
            raise InputError(f"value_clip must be positive, got {self.value_clip}", field="value_clip")


# --- 1. the groups of a case file ------------------------------------------------------------


def group_digest(record: dict) -> str:
    """A fingerprint of a case's group of rollouts (prompt ids, completion ids, rewards; SPEC
    §4.5): PPO-N checks with it that its critic was trained on the cases' own rollouts."""
    data = [record["prompt_ids"], [[r["completion_ids"], r["reward"]] for r in record["rollouts"]]]
    return hashlib.sha256(json.dumps(data, separators=(",", ":")).encode()).hexdigest()[:16]


def case_groups(records: Sequence[dict]) -> list[tuple[str, str, RolloutGroup]]:
    """The distinct groups of rollouts of a case file's records, in file order, as (problem,
    digest, group) (SPEC §4.5); the states of one problem share their group, which appears once."""
    from ..sveb.sweep import problem_of

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


# --- 2. fitting --------------------------------------------------------------------------------


class FrozenFeatures:
    """What a partly frozen critic's frozen layers compute for each rollout
    (:meth:`ValueModel.features`), computed once and reused by every epoch and every critic
    whose frozen layers are the same (same backbone model and revision, same first trained
    layer): PPO-1's folds and both λ in training, every PPO method of ``sveb eval`` (SPEC
    §4.5). Only the trained layers then run, which on the CPU is most of the cost saved.
    ``keep_prompts``: hold the rollouts of at most that many prompts (the most recent; None:
    all), as ``sveb eval`` needs one group at a time."""

    def __init__(self, keep_prompts: Optional[int] = None) -> None:
        self.keep_prompts = keep_prompts
        self.frozen: Optional[tuple] = None
        self.rows: dict[tuple, torch.Tensor] = {}
        self.recent: dict[tuple, None] = {}

    def get(self, model: ValueModel, items: Sequence[tuple[list[int], list[int], float]], *, batch_size: int = 8,
            progress: bool = True) -> Optional[list[torch.Tensor]]:
        """The features of ``items`` (prompt ids, completion ids, reward), computing those not
        held yet one prompt at a time (its rollouts share its encoding); None when ``model``
        cannot skip its frozen layers (:meth:`ValueModel.can_skip_frozen`)."""
        if not model.can_skip_frozen():
            return None
        frozen = (json.dumps(model.info.get("backbone"), sort_keys=True), model.first_trained)
        if self.frozen != frozen:
            self.frozen, self.rows, self.recent = frozen, {}, {}
        keys = [(tuple(p), tuple(c)) for p, c, _ in items]
        by_prompt: dict[tuple, list[tuple]] = {}
        for key in dict.fromkeys(k for k in keys if k not in self.rows):
            by_prompt.setdefault(key[0], []).append(key)
        for prompt, chunk in tqdm(by_prompt.items(), desc="frozen layers", unit="prompt",
                                  disable=not progress or not by_prompt):
            rows = model.features([prompt] * len(chunk), [c for _, c in chunk], batch_size=2 * batch_size)
            self.rows.update(zip(chunk, rows))
        found = [self.rows[k] for k in keys]
        for prompt in dict.fromkeys(k[0] for k in keys):  # most recently used last
            self.recent.pop(prompt, None)
            self.recent[prompt] = None
        while self.keep_prompts is not None and len(self.recent) > max(self.keep_prompts, 1):
            oldest = next(iter(self.recent))
            del self.recent[oldest]
            self.rows = {k: v for k, v in self.rows.items() if k[0] != oldest}
        return found


def all_values(model: ValueModel, items: list[tuple[list[int], list[int], float]], batch_size: int,
                features: Optional[list[torch.Tensor]] = None) -> list[torch.Tensor]:
    """The critic's current V_0 .. V_{T−1} of every item (prompt ids, completion ids, reward),
    without gradients, float32 on the CPU (SPEC §4.5): from ``features`` through the trained
    layers only when given (:class:`FrozenFeatures`), else full passes grouped by prompt."""
    if features is None:
        return values_by_prompt(model, [p for p, _, _ in items], [c for _, c, _ in items], batch_size=batch_size)
    was_training = model.training
    model.eval()
    out: list[torch.Tensor] = []
    with torch.no_grad():
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            out.extend(v.float().cpu() for v in model.sequence_values(
                [p for p, _, _ in chunk], [c for _, c, _ in chunk], features=features[start : start + batch_size]))
    model.train(was_training)
    return out


def _items(groups: Sequence[RolloutGroup]) -> list[tuple[list[int], list[int], float]]:
    """(prompt ids, completion ids, reward) of every rollout with at least one completion token."""
    return [(r.prompt_ids, r.completion_ids, r.reward) for g in groups for r in g.rollouts if r.completion_ids]


def value_loss(model: ValueModel, groups: Sequence[RolloutGroup], lam: float, *, batch_size: int = 8) -> float:
    """Mean squared error of the critic over every completion token of ``groups`` against its
    GAE(λ) targets (SPEC §4.5; for λ < 1 the targets bootstrap on the same values)."""
    items = _items(groups)
    values = all_values(model, items, batch_size)
    errors = [(v - gae_targets(v, reward, lam)) ** 2 for v, (_, _, reward) in zip(values, items)]
    return float(torch.cat(errors).mean()) if errors else math.nan


def fit(model: ValueModel, groups: Sequence[RolloutGroup], config: FitConfig, *, progress: bool = True,
        desc: str = "critic", features: Optional[FrozenFeatures] = None) -> list[dict]:
    """Fit ``model`` to the GAE(λ) targets of every rollout of ``groups`` (SPEC §4.5): each
    epoch recomputes the targets from the critic's current values (for λ = 1 they are the
    reward), shuffles the rollouts (seeded), and takes one AdamW step per ``batch_size``
    rollouts on the mean squared error over their completion tokens (PPO-clipped with
    ``value_clip``). Returns one ``{"epoch", "loss", "tokens"}`` per epoch, ``loss`` the mean of
    the epoch's token errors as they were met. A partly frozen critic runs its frozen layers
    once per rollout (:class:`FrozenFeatures`; pass one to share them between critics)."""
    items = _items(groups)
    if not items:
        raise InputError("no rollout with a completion token to train the critic on")
    feats = (features or FrozenFeatures()).get(model, items, batch_size=config.batch_size, progress=progress)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    shuffle = torch.Generator().manual_seed(config.seed)
    steps = math.ceil(len(items) / config.batch_size)
    bar = tqdm(total=config.epochs * steps, desc=desc, unit="step", disable=not progress)
    history = []
    for epoch in range(config.epochs):
        bootstrap = config.lam < 1.0 or config.value_clip is not None
        old = all_values(model, items, config.batch_size, feats) if bootstrap else None
        targets = [gae_targets(old[k], reward, config.lam) if old is not None else torch.full((len(ids),), reward)
                   for k, (_, ids, reward) in enumerate(items)]
        model.train()
        order = torch.randperm(len(items), generator=shuffle).tolist()
        total, tokens = 0.0, 0
        for start in range(0, len(items), config.batch_size):
            batch = order[start : start + config.batch_size]
            values = torch.cat(model.sequence_values([items[k][0] for k in batch], [items[k][1] for k in batch],
                                                     features=[feats[k] for k in batch] if feats else None))
            target = torch.cat([targets[k] for k in batch]).to(values.device)
            errors = (values - target) ** 2
            if config.value_clip is not None:
                before = torch.cat([old[k] for k in batch]).to(values.device)
                clipped = before + (values - before).clamp(-config.value_clip, config.value_clip)
                errors = torch.maximum(errors, (clipped - target) ** 2)
            optimizer.zero_grad(set_to_none=True)
            errors.mean().backward()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            total += float(errors.detach().sum())
            tokens += errors.numel()
            bar.update(1)
            bar.set_postfix(epoch=epoch + 1, loss=f"{total / tokens:.4f}")
        history.append({"epoch": epoch + 1, "loss": total / tokens, "tokens": tokens})
    bar.close()
    model.eval()
    return history


# --- 3. PPO-1 and PPO-N critics of a case file -------------------------------------------------


def default_layers(device: torch.device | str) -> Optional[int]:
    """Decoder layers a critic trains when none are named (SPEC §4.5): all of them (None) on a
    GPU, the last :data:`CPU_LAYERS` on the CPU."""
    return None if torch.device(device).type == "cuda" else CPU_LAYERS


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
    - ``ppo-1``: ``folds`` seeded folds of the problems (:func:`hista.sveb.sweep.fold_problems`,
      seed ``fit_config.seed``; None: :data:`DEFAULT_FOLDS`, or one per problem when fewer);
      the critic of fold f trains on the problems outside it and scores only fold f's cases;
      written to ``fold-f`` with ``folds.json`` mapping each problem to its fold.

    One pair is written to ``out`` itself, several to ``out/{mode}-{λ}``; they share one
    backbone and its frozen layers' work (:class:`FrozenFeatures`). ``out/train.json`` records
    the request (the cases by their rollouts, not their path): rerunning an interrupted
    request resumes it, keeping the critics already written after checking each wholly
    (:func:`hista.critic.store.check_trained`) and against the request (mode, λ, policy,
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
    from ..models import load
    from ..sveb.eval import read_cases
    from ..sveb.sweep import fold_problems

    modes, lams = _as_list(mode, str), _as_list(lam, float)
    for m in modes:
        if m not in MODES:
            raise InputError(f"unknown critic mode {m!r}; valid: {', '.join(MODES)}", field="--mode")
    config = fit_config or FitConfig()
    for value in lams:
        dataclasses.replace(config, lam=value)  # checks the range
    out = Path(out)
    records, recorded, revision = read_cases(cases_path)
    groups = case_groups(records)
    problems = sorted({p for p, _, _ in groups})
    if "ppo-1" in modes:
        if folds is None and len(problems) < 2:
            raise InputError(f"the cases hold {len(problems)} problem: PPO-1 needs at least 2 problems, one per fold "
                             "(its critics each hold one fold of problems out of training)", path=str(cases_path),
                             field="--folds")
        folds = min(DEFAULT_FOLDS, len(problems)) if folds is None else folds
        if folds < 2:
            raise InputError(f"PPO-1 needs at least 2 folds, got {folds}", field="--folds")
        if folds > len(problems):
            raise InputError(f"{folds} folds but the cases hold {len(problems)} problems: PPO-1 needs a problem in "
                             "every fold", path=str(cases_path), field="--folds")
    pairs = [(m, value) for m in modes for value in lams]
    request = {"format": REQUEST_FORMAT, "cases": str(cases_path),
               "groups": hashlib.sha256("".join(d for _, d, _ in groups).encode()).hexdigest()[:16],
               "modes": modes, "lams": lams, "folds": folds if "ppo-1" in modes else None, "layers": layers,
               "model": model,
               "fit": {k: v for k, v in dataclasses.asdict(config).items() if k != "lam"}}
    new = _check_out(out, request)
    policy = {"model": recorded, "revision": revision}
    plans = []
    for m, value in pairs:
        root = out if len(pairs) == 1 else out / f"{m}-{value:g}"
        if m == "ppo-1":
            plan = [(root / f"fold-{f}", {"index": f, "folds": folds, "seed": config.seed, "scores": held})
                    for f, held in enumerate(fold_problems(problems, folds, config.seed))]
        else:
            plan = [(root, None)]
        plans.append((m, value, root, plan))
    kept = {} if new else _kept(plans, groups, policy)  # every kept critic checked before anything trains
    lm = load(model or recorded, device=device)
    if lm.name == recorded and lm.revision != revision:
        raise InputError(f"cases were built with {recorded} revision '{revision}', but the model loaded now is "
                         f"revision '{lm.revision}'", path=str(cases_path))
    _check_vocabulary(lm, records, cases_path)
    layers = default_layers(lm.device) if layers is None else layers
    count = len(decoder_layers(lm.model.base_model)[1])
    if layers is not None:  # before anything is written
        check_layers(layers, count, field="--layers")
    ours = {"backbone": {"model": lm.name, "revision": lm.revision},
            "layers_trained": count if layers is None else layers}
    for path, info in kept.items():  # kept critics have this run's backbone and trained layers
        for key, want in ours.items():
            if (have := info[key]) != want:
                raise InputError(f"this critic has {key} {have!r}, but this request's critic here has {want!r}; "
                                 f"remove the folder {path} to train it again", path=str(path / CONFIG), field=key)
    if new:
        write_json_atomic(out / REQUEST, request)

    features = FrozenFeatures()
    written = []
    for m, value, root, plan in plans:
        fitted = dataclasses.replace(config, lam=value)
        base = {"policy": policy, "mode": m, "lam": value, "gamma": 1.0}
        for path, fold in plan:
            if path in kept:  # written by an interrupted run of this request
                info = kept[path]["training"]
                written.append({"path": str(path), "mode": m, "lam": value, "problems": info["problems"],
                                "losses": info["losses"], "seconds": info["seconds"], "resumed": True})
                continue
            held = set(fold["scores"]) if fold else set()
            train = [(p, d, g) for p, d, g in groups if p not in held]
            rewards = [r.reward for _, _, g in train for r in g.rollouts]
            critic = ValueModel.from_policy(lm, layers=layers, init_value=sum(rewards) / len(rewards))
            desc = f"critic {m} λ={value:g}" + (f" fold {fold['index'] + 1}/{folds}" if fold else "")
            start = time.time()
            losses = fit(critic, [g for _, _, g in train], fitted, progress=progress, desc=desc, features=features)
            seconds = time.time() - start
            critic.info.update(base, fold=fold, training={
                "cases": str(cases_path), "settings": records[0]["settings"],
                "problems": sorted({p for p, _, _ in train}), "groups": {p: d for p, d, _ in train},
                "rollouts": len(rewards), "fit": dataclasses.asdict(fitted), "init_value": sum(rewards) / len(rewards),
                "losses": losses, "seconds": round(seconds, 1)})
            critic.save_pretrained(path)
            written.append({"path": str(path), "mode": m, "lam": value, "problems": critic.info["training"]["problems"],
                            "losses": losses, "seconds": seconds})
            del critic
        if m == "ppo-1":
            index = {"format": FOLDS_FORMAT, "hista_version": __version__, **base, "folds": folds,
                     "seed": config.seed, "cases": str(cases_path), "dirs": [p.name for p, _ in plan],
                     "problems": {p: f["index"] for _, f in plan for p in f["scores"]}}
            write_json_atomic(root / FOLDS, index)
    return {"out": str(out), "critics": written}


def _kept(plans: Sequence[tuple], groups: Sequence[tuple[str, str, RolloutGroup]], policy: dict) -> dict:
    """Path -> ``critic.json`` record of each critic an interrupted run of the request left
    (a folder with its ``critic.json``; SPEC §4.5), each checked wholly
    (:func:`hista.critic.store.check_trained`: every file, its fields) and against the plan: its
    mode, λ, policy, fold, and the problems and groups it was to train on (so a PPO-1 critic
    never scores a problem it trained on). An InputError names the file and field."""
    from .store import check_trained

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


__all__ = ["CONFIG", "DEFAULT_FOLDS", "FOLDS", "FitConfig", "FrozenFeatures", "MODES", "case_groups",
           "default_layers", "fit", "all_values", "group_digest", "train_critics", "value_loss"]
