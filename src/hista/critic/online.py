"""The critic of the PPO baseline in training (SPEC §4.5): a :class:`ValueModel` copied from
the policy when the trainer starts, with its own AdamW optimiser, trained on every generation
batch alongside the policy.

Per generation batch, in PPO's order:

1. :meth:`OnlineCritic.observe`: the critic's values V_0 .. V_{T−1} of every rollout, without
   gradients (a partly frozen critic runs its frozen layers once per rollout here and its
   update reuses them: :class:`hista.critic.fit.FrozenFeatures`; before the very first
   batch, the head's bias is set to that batch's mean reward, its weight being 0, so the first
   baseline is the batch mean rather than an arbitrary 0);
2. the ``critic`` estimator (:class:`hista.estimators.ppo.PPOBaseline`) reads those values
   through :meth:`OnlineCritic.values` and turns them into GAE(λ) advantages;
3. :meth:`OnlineCritic.update`: GAE(λ) targets from the same pre-update values (γ = 1, the
   reward at the last token), then ``critic_epochs`` seeded passes of AdamW steps of
   ``critic_batch_size`` rollouts on the squared error over completion tokens, PPO-clipped
   around the pre-update values when ``value_clip`` is set. Returns the step's metrics.

Several processes: the trainer gathers whole groups on every rank, and every rank runs the same
update on the same data from the same seed, so each rank holds its own copy of one critic and
no critic tensor crosses processes (up to the floating-point nondeterminism of the kernels; the
main process's copy is the one saved). Every rank thus does the whole batch's critic work.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

import torch

from ..errors import InputError
from ..estimators.gae import gae_targets
from ..types import RolloutGroup
from .fit import FrozenFeatures, all_values
from .model import ValueModel

#: the critic's optimiser state, beside its weights in a checkpoint's ``critic/`` folder
OPTIMIZER = "optimizer.pt"
#: gradient clipping of the critic's steps (as ``hista critic train``)
MAX_GRAD_NORM = 1.0


def policy_revision(model: Any, name: str) -> str:
    """The revision string :func:`hista.models.load` records for a model it loads by ``name``, for
    a policy that TRL loaded instead: the hub commit hash when known, else
    ``path:<absolute path>`` for a local folder, else the name."""
    commit = getattr(getattr(model, "config", None), "_commit_hash", None)
    if commit:
        return str(commit)
    return f"path:{Path(name).resolve()}" if Path(name).exists() else name


def clipped_value_errors(values: torch.Tensor, targets: torch.Tensor, old: torch.Tensor,
                         clip: Optional[float]) -> torch.Tensor:
    """Per-token value errors of PPO's critic loss (SPEC §4.5): (V − G)², or with ``clip`` = ε
    max((V − G)², (V_old + clip(V − V_old, −ε, ε) − G)²), V_old the values the batch was
    scored with."""
    errors = (values - targets) ** 2
    if clip is None:
        return errors
    clipped = old + (values - old).clamp(-clip, clip)
    return torch.maximum(errors, (clipped - targets) ** 2)


class _Scored(NamedTuple):
    """One rollout of a batch: its tokens, pre-update values, GAE(λ) targets, group mean reward."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    old: torch.Tensor
    targets: torch.Tensor
    group_mean: float


class OnlineCritic:
    """A :class:`ValueModel` trained alongside the policy (SPEC §4.5, §9; see the module
    docstring for one generation batch). ``config``: the ``critic`` estimator's
    :class:`hista.estimators.ppo.CriticConfig`; ``seed``: the shuffling seed; ``bf16``: run the
    critic's passes under bfloat16 autocast on CUDA (its weights stay float32)."""

    def __init__(self, model: ValueModel, config: Any, *, seed: int = 0, bf16: bool = False):
        self.model = model
        self.config = config
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.critic_lr, weight_decay=0.0)
        self.shuffle = torch.Generator().manual_seed(seed)
        self.bf16 = bf16 and model.device.type == "cuda"
        self.updates = 0
        self._scored: dict[tuple, torch.Tensor] = {}
        self._features = FrozenFeatures()
        self._seconds = 0.0

    @classmethod
    def from_policy(cls, lm: Any, config: Any, *, seed: int = 0, device: Optional[torch.device] = None,
                    checkpointing: bool = False, bf16: bool = False) -> "OnlineCritic":
        """A fresh critic copied from the policy ``lm`` (a :class:`hista.models.LoadedModel`;
        :meth:`ValueModel.from_policy`: float32, the last ``config.critic_layers`` layers
        trainable), on ``device`` (default: the policy's), with activation checkpointing when
        ``checkpointing``. A layer count the policy does not have raises an InputError naming
        ``advantage_estimator.critic_layers``."""
        try:
            model = ValueModel.from_policy(lm, layers=config.critic_layers)
        except InputError as exc:
            raise InputError(exc.message, field="advantage_estimator.critic_layers") from None
        if device is not None:
            model.to(device)
        if checkpointing:
            model.backbone.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.info.update({"policy": {"model": lm.name, "revision": lm.revision}, "mode": "online",
                           "lam": config.lam, "gamma": 1.0})
        model.eval()
        return cls(model, config, seed=seed, bf16=bf16)

    def _autocast(self):
        return torch.autocast("cuda", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    # ---- one generation batch -----------------------------------------------------------------
    def observe(self, groups: Sequence[RolloutGroup]) -> None:
        """Score every rollout of ``groups`` with the current critic, without gradients (step 1
        of the module docstring); :meth:`values` and :meth:`update` read these values."""
        start = time.perf_counter()
        rollouts = [r for g in groups for r in g.rollouts]
        if self.updates == 0 and rollouts:
            with torch.no_grad():
                self.model.head.bias.fill_(sum(r.reward for r in rollouts) / len(rollouts))
        items = [(r.prompt_ids, r.completion_ids, r.reward) for r in rollouts]
        self._features = FrozenFeatures()  # a partly frozen critic runs its frozen layers once per batch
        with self._autocast():
            feats = self._features.get(self.model, items, batch_size=self.config.critic_batch_size, progress=False)
            values = all_values(self.model, items, self.config.critic_batch_size, feats)
        self._scored = {(tuple(r.prompt_ids), tuple(r.completion_ids)): v for r, v in zip(rollouts, values)}
        self._seconds = time.perf_counter() - start

    def values(self, prompt_ids: Sequence[int], completion_ids: Sequence[Sequence[int]], *, terminal: bool = False,
               batch_size: int = 8) -> list[torch.Tensor]:
        """V_0 .. V_{T−1} of completions of one prompt (the interface of
        :meth:`ValueModel.values`, which the ``critic`` estimator reads): the values
        :meth:`observe` computed, or the critic's current values for rollouts it did not see
        (and with ``terminal``)."""
        keys = [(tuple(prompt_ids), tuple(c)) for c in completion_ids]
        if terminal or not all(k in self._scored for k in keys):
            with self._autocast():
                return self.model.values(prompt_ids, completion_ids, terminal=terminal, batch_size=batch_size)
        return [self._scored[k] for k in keys]

    def update(self, groups: Sequence[RolloutGroup]) -> dict[str, float]:
        """Train the critic on ``groups`` (step 3 of the module docstring) and return the step's
        metrics, computed over the completion tokens of the batch:

        - ``critic/value_loss``: the mean (clipped) squared error of the update's steps, as met;
        - ``critic/explained_variance``: 1 − Var(G − V) / Var(G), V the pre-update values and G
          their GAE(λ) targets (NaN when every target is equal);
        - ``critic/mean_abs_v_minus_group_mean``: mean |V_t − mean reward of the group|;
        - ``critic/seconds``: time spent in :meth:`observe` and here."""
        start = time.perf_counter()
        items = []
        for group in groups:
            mean = sum(r.reward for r in group.rollouts) / max(len(group.rollouts), 1)
            for r in group.rollouts:
                if r.completion_ids:
                    old = self.values(r.prompt_ids, [r.completion_ids])[0]
                    targets = gae_targets(old, r.reward, self.config.lam)
                    items.append(_Scored(r.prompt_ids, r.completion_ids, old, targets, mean))
        metrics = {"critic/value_loss": math.nan, "critic/explained_variance": math.nan,
                   "critic/mean_abs_v_minus_group_mean": math.nan}
        if items:
            old = torch.cat([x.old for x in items])
            targets = torch.cat([x.targets for x in items])
            means = torch.cat([torch.full((len(x.completion_ids),), x.group_mean) for x in items])
            spread = float(targets.var(unbiased=False))
            if spread > 0:
                metrics["critic/explained_variance"] = 1.0 - float((targets - old).var(unbiased=False)) / spread
            metrics["critic/mean_abs_v_minus_group_mean"] = float((old - means).abs().mean())
            metrics["critic/value_loss"] = self._fit(items)
        self._scored, self._features = {}, FrozenFeatures()
        metrics["critic/seconds"] = self._seconds + time.perf_counter() - start
        self._seconds = 0.0
        return metrics

    def _fit(self, items: list[_Scored]) -> float:
        """``critic_epochs`` seeded passes of AdamW steps over ``items``; the mean token error."""
        size, device = self.config.critic_batch_size, self.model.device
        total, tokens = 0.0, 0
        self.model.train()
        with torch.enable_grad():
            for _ in range(self.config.critic_epochs):
                order = torch.randperm(len(items), generator=self.shuffle).tolist()
                for first in range(0, len(order), size):
                    batch = [items[k] for k in order[first: first + size]]
                    feats = self._features.get(self.model, [(x.prompt_ids, x.completion_ids, 0.0) for x in batch],
                                               progress=False)
                    with self._autocast():
                        values = self.model.sequence_values([x.prompt_ids for x in batch],
                                                            [x.completion_ids for x in batch], features=feats)
                    targets = torch.cat([x.targets for x in batch]).to(device)
                    old = torch.cat([x.old for x in batch]).to(device)
                    errors = clipped_value_errors(torch.cat(values).float(), targets, old, self.config.value_clip)
                    self.optimizer.zero_grad(set_to_none=True)
                    errors.mean().backward()
                    torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM)
                    self.optimizer.step()
                    total += float(errors.detach().sum())
                    tokens += errors.numel()
        self.model.eval()
        self.updates += 1
        return total / tokens

    # ---- checkpoints --------------------------------------------------------------------------
    def save(self, folder: str | Path, *, optimizer: bool = True) -> Path:
        """Write the critic into ``folder`` (:meth:`ValueModel.save_pretrained`; ``critic.json``
        records the policy, λ, γ, mode ``online``, the configuration and the updates made) and,
        with ``optimizer``, its optimiser and shuffling state into ``folder/optimizer.pt``."""
        folder = Path(folder)
        self.model.info["training"] = {"online": self.config.to_dict(), "updates": self.updates}
        self.model.save_pretrained(folder)
        if optimizer:
            torch.save({"optimizer": self.optimizer.state_dict(), "shuffle": self.shuffle.get_state(),
                        "updates": self.updates}, folder / OPTIMIZER)
        return folder

    def load(self, folder: str | Path) -> None:
        """Restore the critic saved by :meth:`save` into ``folder`` (a checkpoint's ``critic/``):
        its weights, and its optimiser and shuffling state. An InputError names the folder when
        it holds no critic, a critic with other trained layers, or no optimiser state, and the
        file of a damaged critic (:func:`hista.critic.model.check_folder`). A resumed training
        run reads the folder through :func:`hista.train.checkpoints.check_critic` instead, which
        checks every tensor and field, and hands the result to :meth:`restore`."""
        folder = Path(folder)
        if not (folder / OPTIMIZER).is_file():
            raise InputError(f"holds no critic optimiser state ({OPTIMIZER}): the checkpoint was not written by a "
                             "run with the critic estimator", path=str(folder))
        saved = ValueModel.from_pretrained(folder, device="cpu", fix="resume from another checkpoint (or start "
                                                                    "the run again)")
        if saved.layers_trained != self.model.layers_trained:
            raise InputError(f"the saved critic trained {saved.layers_trained} layers, this run's trains "
                             f"{self.model.layers_trained} (advantage_estimator.critic_layers)", path=str(folder))
        self.restore(saved.backbone.state_dict(), saved.head.state_dict(),
                     torch.load(folder / OPTIMIZER, map_location="cpu", weights_only=True))

    def restore(self, backbone: dict[str, torch.Tensor], head: dict[str, torch.Tensor], state: dict) -> None:
        """Set the critic to one saved by :meth:`save`: ``backbone`` the tensors of its
        backbone by name (those of frozen layers may be left out: they stay this critic's,
        copied from the same policy), ``head`` its head's ``weight`` and ``bias``, ``state``
        what ``optimizer.pt`` holds (``optimizer``, ``shuffle``, ``updates``), all already
        checked (:func:`hista.train.checkpoints.check_critic`, :meth:`load`). A trained tensor
        missing or a tensor this critic lacks is a ValueError."""
        result = self.model.backbone.load_state_dict(backbone, strict=False)
        trained = {name for name, param in self.model.backbone.named_parameters() if param.requires_grad}
        if result.unexpected_keys or trained & set(result.missing_keys):
            raise ValueError(f"the weights do not fit the critic: {sorted(result.unexpected_keys)[:3]} are not its "
                             f"tensors, {sorted(trained & set(result.missing_keys))[:3]} are missing")
        self.model.head.load_state_dict(head)
        self.optimizer.load_state_dict(state["optimizer"])
        self.shuffle.set_state(state["shuffle"].cpu())
        self.updates = int(state["updates"])
