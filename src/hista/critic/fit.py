"""Fitting a PPO critic (SPEC §4.5): regression of a :class:`ValueModel` on GAE(λ) targets of
rollouts, MSE over completion tokens, AdamW, seeded shuffling, optional PPO value clipping; for
λ < 1 the targets bootstrap on the critic's own values, recomputed every epoch. What a partly
frozen critic's frozen layers compute is computed once (:class:`FrozenFeatures`). Knows nothing
of where the rollouts come from: :mod:`hista.sveb.critic_training` fits critics on SVEB cases,
:mod:`hista.critic.online` alongside a policy."""

from __future__ import annotations

import json
import math
from typing import Optional, Sequence

import torch
from tqdm.auto import tqdm

from ..errors import InputError
from ..estimators.gae import gae_targets
from ..estimators.ppo import critic_values
from ..types import RolloutGroup
from .config import CPU_LAYERS, FitConfig
from .model import ValueModel


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
        return critic_values(model, [p for p, _, _ in items], [c for _, c, _ in items], batch_size=batch_size)
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


def default_layers(device: torch.device | str) -> Optional[int]:
    """Decoder layers a critic trains when none are named (SPEC §4.5): all of them (None) on a
    GPU, the last :data:`CPU_LAYERS` on the CPU."""
    return None if torch.device(device).type == "cuda" else CPU_LAYERS
