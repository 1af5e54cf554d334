"""hista inside verl: policy losses and advantage estimators registered with verl's own registries
(SPEC §4, §5; docs/verl.md).

verl imports this module in every process that imports ``verl`` (driver and Ray workers),
through the ``verl.plugins`` entry point hista declares; importing it registers, with
``verl.trainer.ppo.core_algos``:

* the policy losses of :data:`LOSSES`, hista's losses that verl lacks and that need only
  log-probs, old log-probs, advantages and the response mask, as verl policy-loss functions:
  hista computes the per-token loss (:meth:`hista.losses.Loss.per_token`) and verl's
  ``agg_loss`` aggregates it with the run's ``loss_agg_mode`` and global batch information;
* the estimators of :data:`ESTIMATORS`, hista estimators that need only what verl's trainer
  hands an estimator (rewards, the response mask and the group index ``uid``), and those of
  :data:`hista.integrations.verl_settings.TEXT_ESTIMATORS` (Numca), which also read the
  responses that hista's verl trainers provide;

and, with ``verl.trainer.ppo.v1.trainer_base`` (verl's v1 trainer, which needs TransferQueue),
hista's trainers ``hista_sync``, ``hista_colocate_async`` and ``hista_separate_async``
(:mod:`hista.integrations.verl_trainer`).

Parameters that verl's strict config does not know reach hista through two environment
variables holding a YAML mapping, read when a loss or estimator runs: ``HISTA_LOSS`` (``{lam:
0.95, trace: recency}``; ``eps_low`` / ``eps_high`` default to verl's ``clip_ratio_low`` /
``clip_ratio_high``) and ``HISTA_ESTIMATOR`` (``{scale: batch}``). verl logs a failed plugin
import at debug level only: ``hista verl check`` imports and registers in the open and prints
what is registered. Without verl installed, importing this module registers nothing.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Optional

import numpy as np
import torch

from .. import losses
from ..advantages import estimate, group_rows, scatter
from ..errors import InputError
from ..types import Rollout, RolloutGroup
from .verl_settings import ESTIMATOR_ENV, ESTIMATORS, LOSS_ENV, estimator_for, reset_estimators, settings

__all__ = ["ESTIMATORS", "ESTIMATOR_ENV", "EQUIVALENT", "LOSSES", "LOSS_ENV", "REGISTERED", "estimator_for",
           "make_estimator", "make_loss", "register", "reset_estimators", "settings", "status"]

#: hista losses verl already has: the verl overrides that give the same objective
#: (docs/verl.md; tests/integrations/test_verl.py checks each on random tensors). verl's ``vanilla`` loss adds a
#: dual clip for negative advantages (``clip_ratio_c``, default 3), which hista's losses do not
#: have: a very large ``clip_ratio_c`` turns it off.
_A = "actor_rollout_ref.actor."
EQUIVALENT = {
    "dapo": {f"{_A}policy_loss.loss_mode": "vanilla", f"{_A}loss_agg_mode": "token-mean",
             f"{_A}clip_ratio_low": 0.2, f"{_A}clip_ratio_high": 0.28, f"{_A}clip_ratio_c": 1e9},
    "grpo": {f"{_A}policy_loss.loss_mode": "vanilla", f"{_A}loss_agg_mode": "seq-mean-token-mean",
             f"{_A}clip_ratio_low": 0.2, f"{_A}clip_ratio_high": 0.2, f"{_A}clip_ratio_c": 1e9},
    "dr_grpo": {f"{_A}policy_loss.loss_mode": "vanilla", f"{_A}loss_agg_mode": "seq-mean-token-sum-norm",
                f"{_A}clip_ratio_low": 0.2, f"{_A}clip_ratio_high": 0.2, f"{_A}clip_ratio_c": 1e9,
                "algorithm.norm_adv_by_std_in_grpo": False},
    "gspo": {f"{_A}policy_loss.loss_mode": "gspo", f"{_A}loss_agg_mode": "seq-mean-token-mean",
             f"{_A}clip_ratio_low": 3e-4, f"{_A}clip_ratio_high": 4e-4},
    "cispo": {f"{_A}policy_loss.loss_mode": "cispo", f"{_A}loss_agg_mode": "token-mean",
              f"{_A}clip_ratio_low": 1.0, f"{_A}clip_ratio_high": 4.0},
}
#: hista losses registered with verl, read from the loss registry (plugins' included): those verl
#: has no equivalent of that need only log-probs, old log-probs, advantages and the mask (what a
#: verl policy loss is given: ``strace``, which needs the old policy's entropies, is left out)
LOSSES = tuple(name for name in losses.names() if name not in EQUIVALENT
               and not (losses.lookup(name).needs_entropy or losses.lookup(name).needs_ref_logp))


def _clip(config: Any, name: str) -> Optional[float]:
    """verl's clip ratio ``name`` (``clip_ratio_low`` / ``_high``, else ``clip_ratio``)."""
    if config is None:
        return None
    value = getattr(config, name, None)
    return getattr(config, "clip_ratio", None) if value is None else value


def make_loss(name: str) -> Callable:
    """hista loss ``name`` as a verl policy-loss function (SPEC §5): ``fn(old_log_prob,
    log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights) -> (loss,
    metrics)``. The per-token loss is hista's; the aggregation is verl's ``agg_loss`` with the
    run's ``loss_agg_mode`` and ``config.global_batch_info``; ``rollout_is_weights`` multiply the
    per-token loss as hista's ``token_weights``; parameters come from ``HISTA_LOSS`` over
    verl's clip ratios."""
    from verl.trainer.ppo.core_algos import agg_loss

    def loss_fn(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config: Any = None,
                rollout_is_weights: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, dict[str, Any]]:
        """What verl calls: hista's per-token loss, aggregated by verl's ``agg_loss``, and its metrics."""
        params = {"eps_low": _clip(config, "clip_ratio_low"), "eps_high": _clip(config, "clip_ratio_high")}
        params = {k: v for k, v in params.items() if v is not None}
        loss = losses.get(name, **{**params, **settings(LOSS_ENV)})
        per_token, mask, out, kl = loss.per_token(log_prob, old_log_prob, advantages, response_mask,
                                                  token_weights=rollout_is_weights)
        info = dict(getattr(config, "global_batch_info", None) or {})
        value = agg_loss(loss_mat=per_token, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **info)
        metrics = loss.metrics(mask, out, kl)
        with torch.no_grad():
            ppo_kl = float(-(torch.where(mask, log_prob - old_log_prob, torch.zeros_like(log_prob))).sum()
                           / mask.sum().clamp(min=1))
        return value, {"actor/pg_clipfrac": metrics["clip_frac_high"], "actor/pg_clipfrac_lower":
                       metrics["clip_frac_low"], "actor/ppo_kl": ppo_kl,
                       **{f"actor/hista_{k}": v for k, v in metrics.items()}}

    loss_fn.__name__ = loss_fn.__qualname__ = f"hista_{name}_loss"
    return loss_fn


def make_estimator(name: str) -> Callable:
    """hista estimator ``name`` as a verl advantage estimator (SPEC §4): ``fn(token_level_rewards,
    response_mask, index, config, **_) -> (advantages, returns)``. Rollouts sharing an ``index``
    (verl's ``uid``) form a group; a rollout's reward is its row sum of ``token_level_rewards``.
    ``scale`` comes from ``HISTA_ESTIMATOR``, else ``config.norm_adv_by_std_in_grpo`` (group
    std, or unscaled when false); ``gae_lambda`` from ``HISTA_ESTIMATOR``, else
    ``config.lam``. Returns are the advantages, as verl's GRPO returns them. An estimator of
    ``verl_settings.TEXT_ESTIMATORS`` reads each row's token ids, text and offsets from
    ``verl_trainer.RESPONSES``, one of ``verl_settings.HIDDEN_ESTIMATORS`` each row's captured states from
    ``verl_trainer.STATES`` (both set by hista's verl trainers; elsewhere it raises naming
    them). An estimator that learns across groups (the probe) is fitted for each group on the
    batch's other groups and its history (:meth:`hista.estimators.probe.Probe.for_batch`)."""
    from .verl_settings import HIDDEN_ESTIMATORS, TEXT_ESTIMATORS
    from .verl_trainer import RESPONSES, STATES

    verl_name = next(v for v, n in ESTIMATORS.items() if n == name)
    source = RESPONSES if verl_name in TEXT_ESTIMATORS else STATES if verl_name in HIDDEN_ESTIMATORS else None
    states = source is STATES

    def estimator_fn(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None,
                     config: Any = None, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """What verl calls: the batch's token advantages under hista's estimator, also as the returns."""
        params = settings(ESTIMATOR_ENV)
        scale = params.get("scale", "group" if getattr(config, "norm_adv_by_std_in_grpo", True) else "none")
        lam = float(params.get("gae_lambda", getattr(config, "lam", 1.0) if config is not None else 1.0))
        est, _ = estimator_for(verl_name)
        rewards = token_level_rewards.sum(dim=-1)
        lengths = response_mask.sum(dim=-1).long().tolist()
        held = _held_rows(verl_name, source, states, lengths, response_mask.shape[-1])
        if held is not None:
            lengths = [h[1] if states else len(h[0]) for h in held]
        rows, groups = _groups(index, lengths, rewards, held, states)
        batch_std = float(rewards.std()) if rewards.numel() > 1 else 0.0
        with torch.no_grad():
            per_group = estimate(est, groups, gae_lambda=lam, scale=scale, batch_std=batch_std)
        out = scatter(per_group, token_level_rewards.shape, rows=rows, device=token_level_rewards.device)
        out = out * response_mask
        return out, out

    estimator_fn.__name__ = estimator_fn.__qualname__ = f"hista_{name}_estimator"
    return estimator_fn


def _held_rows(verl_name: str, source: Any, states: bool, lengths: list[int], width: int) -> Optional[list]:
    """The rows hista's verl trainer holds in ``source`` (responses or states), checked against the batch."""
    if source is None:
        return None
    held = source.get()
    if held is None:
        what = "hidden states captured on the actor" if states else "the responses"
        raise RuntimeError(f"{verl_name} reads {what}, which verl's own trainers do not pass to an estimator: run "
                           "it with trainer.use_v1=True trainer.v1.trainer_mode=hista_sync (or "
                           "hista_colocate_async, hista_separate_async; docs/verl.md)")
    sizes = [h[1] if states else len(h[0]) for h in held]
    if len(held) != len(lengths) or any(n > width for n in sizes):
        raise RuntimeError(f"{verl_name}: {len(held)} rows held for a batch of {len(lengths)} rows of at most "
                           f"{width} tokens: rows and responses do not match")
    return held


def _rollout(row: int, length: int, reward: float, held: Optional[list], states: bool) -> Rollout:
    """Row ``row`` as a Rollout: placeholder tokens, or what the trainer holds of it (states or response)."""
    if held is None:
        return Rollout(prompt_ids=[], completion_ids=[0] * length, reward=reward)
    if states:
        prompt, length, _ = held[row]
        return Rollout(prompt_ids=[0] * prompt, completion_ids=[0] * length, reward=reward)
    ids, completion, offsets = held[row]
    return Rollout(prompt_ids=[], completion_ids=ids, reward=reward, completion_text=completion, offsets=offsets)


def _groups(index: Any, lengths: list[int], rewards: torch.Tensor, held: Optional[list],
            states: bool) -> tuple[list[list[int]], list[RolloutGroup]]:
    """The rows of each group key (verl's ``uid``; else one group a row) and each group as a RolloutGroup."""
    keys = np.asarray(index if index is not None else np.arange(len(lengths)), dtype=object).tolist()
    rows = list(group_rows(keys, len(lengths), singles=True).values())
    groups = []
    for members in rows:
        group = RolloutGroup([_rollout(r, lengths[r], float(rewards[r]), held, states) for r in members],
                             prompt_id=str(keys[members[0]]))
        if states:
            group.representations = [held[r][2] for r in members]
        groups.append(group)
    return rows, groups


def register() -> dict[str, list[str]]:
    """Register :data:`LOSSES` and :data:`ESTIMATORS` with verl (SPEC §4, §5), skipping a name
    verl's registry already holds from another package (verl's own, or a second import).
    Also registers hista's verl trainers (:func:`verl_trainer.register_trainers`) when verl's
    v1 trainer imports; otherwise ``trainers_error`` says why. Returns the names this call
    registered and the names it found taken."""
    from verl.trainer.ppo import core_algos

    from .verl_trainer import register_trainers

    done: dict[str, Any] = {"losses": [], "estimators": [], "taken": [], "trainers": [], "trainers_error": None}
    for name in LOSSES:
        if name in core_algos.POLICY_LOSS_REGISTRY:
            done["taken"].append(name)
            continue
        core_algos.register_policy_loss(name)(make_loss(name))
        done["losses"].append(name)
    for verl_name, name in ESTIMATORS.items():
        if verl_name in core_algos.ADV_ESTIMATOR_REGISTRY:
            done["taken"].append(verl_name)
            continue
        core_algos.register_adv_est(verl_name)(make_estimator(name))
        done["estimators"].append(verl_name)
    try:
        done["trainers"] = register_trainers()
    except ImportError as exc:
        done["trainers_error"] = f"{type(exc).__name__}: {exc}"
    return done


#: What importing this module registered (None without verl).
REGISTERED = register() if importlib.util.find_spec("verl") is not None else None


def status() -> dict:
    """What ``hista verl check`` prints (docs/verl.md): the verl version, hista's entry point in
    the ``verl.plugins`` group, and for each name hista registers whether verl's registry holds
    hista's function. Imports verl (which runs its plugin discovery) in the open, so a failing
    import raises here instead of being logged at debug level; an InputError when verl is not
    installed or cannot be imported."""
    from importlib.metadata import entry_points

    if importlib.util.find_spec("verl") is None:
        raise InputError("verl is not installed: pip install 'hista[verl]' (a separate environment from hista[trl] "
                         "is advised, docs/verl.md)", field="verl")
    try:
        import verl
        from verl.trainer.ppo import core_algos
    except Exception as exc:  # noqa: BLE001 - any failure to import verl is this environment's problem
        raise InputError(f"verl is installed but does not import: {type(exc).__name__}: {exc}", field="verl") from None
    points = [f"{ep.name} = {ep.value}" for ep in entry_points(group="verl.plugins") if ep.value.startswith("hista")]
    losses_ = {n: getattr(core_algos.POLICY_LOSS_REGISTRY.get(n), "__name__", None) == f"hista_{n}_loss"
               for n in LOSSES}
    ests = {v: getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(v), "__name__", None) == f"hista_{n}_estimator"
            for v, n in ESTIMATORS.items()}
    from .verl_trainer import MODES

    try:
        from verl.trainer.ppo.v1 import trainer_base
    except ImportError as exc:
        trainers: Any = f"verl's v1 trainer does not import ({type(exc).__name__}: {exc}); hista_numca needs it"
    else:
        trainers = {f"hista_{m}": getattr(trainer_base.TRAINER_REGISTRY.get(f"hista_{m}"), "__module__", None)
                    == "hista.integrations.verl_trainer" for m in MODES}
    try:
        from . import verl_hidden
    except ImportError as exc:
        capture = f"cannot be installed: {type(exc).__name__}: {exc}"
    else:
        capture = (f"installed by hista's trainers on FSDP actors ({', '.join(verl_hidden.STRATEGIES)}): "
                   f"{verl_hidden.HistaActorRolloutRefWorker.__name__}, {verl_hidden.HistaDetachActorWorker.__name__}")
    if isinstance(trainers, str):
        capture = "cannot be installed: it needs hista's trainers (verl's v1 trainer)"
    return {"verl": getattr(verl, "__version__", "unknown"), "entry_points": points, "losses": losses_,
            "estimators": ests, "trainers": trainers, "capture": capture, "equivalent": EQUIVALENT}
