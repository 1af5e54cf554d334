"""The estimator protocol, configuration and advantage scaling shared by every estimator
(SPEC §3, §4.1)."""

from __future__ import annotations

import abc
import dataclasses
import json
import math
from typing import Any, ClassVar, Optional, Sequence

import torch

from ..errors import InputError
from ..types import Rollout, RolloutGroup, State

SCALES = ("group", "batch", "none")
STD_EPS = 1e-4


def layer_at_depth(num_layers: int, depth: float) -> int:
    """The hidden-state index, counted from the end as transformers' ``hidden_states[layer]``
    (−1 the last), of the layer at relative depth ``depth`` of a model with ``num_layers``
    decoder layers: index round(depth · num_layers) of the num_layers + 1 hidden states (0 the
    embeddings), minus num_layers + 1 (docs/estimators.md "Structure rule"; SmolLM2's 30
    layers at depth 23/30 give −8). A ValueError for fewer than one layer or a depth outside
    [0, 1]."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must lie in [0, 1], got {depth}")
    return int(math.floor(depth * num_layers + 0.5)) - (num_layers + 1)


def check_finite(values: torch.Tensor, name: str = "rewards") -> torch.Tensor:
    """Return ``values`` unchanged, or raise ValueError naming ``name`` when it holds a NaN or
    an infinite entry (reliability: one NaN reward would silently make every
    advantage of its group non-finite). Costs one ``torch.isfinite(...).all()``."""
    values = torch.as_tensor(values)
    if values.is_floating_point() and not bool(torch.isfinite(values).all()):
        bad = values[~torch.isfinite(values)].flatten()[0].item()
        raise ValueError(f"{name} holds {bad} ({int((~torch.isfinite(values)).sum())} non-finite of "
                         f"{values.numel()}); rewards and values must be finite")
    return values


def others_mean(rewards: torch.Tensor) -> torch.Tensor:
    """The mean of the *other* rollouts' rewards for each rollout [G], in the rewards' dtype and
    device (the leave-one-out mean, docs/estimators.md "Valid baselines"): a baseline for rollout
    i that never reads R_i. A group of one, which has no others, keeps its own reward (advantage
    0, as ``grpo?leave_one_out=true``). Exactly r when every reward is r."""
    rewards = check_finite(rewards, "rewards")
    if len(rewards) < 2:
        return rewards.clone()
    centred = rewards - rewards[0]
    return rewards[0] + (centred.sum() - centred) / (len(rewards) - 1)


def state_length(group: RolloutGroup, state: State, index: int) -> int:
    """The completion length T of the rollout that state ``index`` of a ``state_values`` call
    names (SPEC §3: a state s_{i,t} has 0 <= t <= T); a ValueError naming the state when it
    names no rollout of ``group`` or its t lies outside 0..T."""
    if state.rollout is None or not 0 <= state.rollout < len(group.rollouts):
        raise ValueError(f"states[{index}] names rollout {state.rollout}; the group has {len(group.rollouts)}")
    length = len(group.rollouts[state.rollout].completion_ids)
    if not 0 <= state.t <= length:
        raise ValueError(f"states[{index}]: t={state.t} outside 0..{length} (rollout {state.rollout})")
    return length


def _std(rewards: torch.Tensor) -> torch.Tensor:
    if rewards.numel() < 2:
        return torch.zeros((), dtype=torch.float32)
    return rewards.float().std(unbiased=True)


def group_std(rewards: torch.Tensor) -> torch.Tensor:
    """Unbiased standard deviation of a group's rewards, 0 for a group of fewer than two
    (SPEC §4.1). Non-finite rewards raise ValueError naming ``rewards``."""
    return _std(check_finite(rewards, "rewards"))


def _scale(advantages: list[torch.Tensor], rewards: torch.Tensor, scale: str, batch_std: Optional[float]
           ) -> list[torch.Tensor]:
    if scale == "none":
        return advantages
    if scale == "group":
        std = float(_std(rewards))
    elif scale == "batch":
        if batch_std is None:
            raise ValueError('scale="batch" needs batch_std (the reward std over the whole batch)')
        std = float(batch_std)
        if not math.isfinite(std):
            raise ValueError(f"batch_std is {std}; it must be finite (the reward std over the whole batch)")
    else:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    return [a / (std + STD_EPS) for a in advantages]


def scale_advantages(
    advantages: list[torch.Tensor], rewards: torch.Tensor, scale: str = "group", batch_std: Optional[float] = None
) -> list[torch.Tensor]:
    """Divide per-token advantages by (std + 1e-4) (SPEC §4.1): the group's reward std
    (``scale="group"``), a std given by the caller for the whole batch (``"batch"``,
    ``batch_std`` required), or leave them unscaled (``"none"``). Non-finite ``rewards`` or
    ``batch_std`` raise ValueError naming them."""
    return _scale(advantages, check_finite(rewards, "rewards"), scale, batch_std)


def state_field(state: Any, name: str, owner: str, kind: type, expected: str) -> Any:
    """The one field ``name`` of ``owner``'s checkpointed state, checked: ``state`` is
    a dict holding ``name`` and nothing else, and its value is a ``kind`` (``expected`` says
    what, in the message). Anything else is an InputError naming the field."""
    if not isinstance(state, dict):
        raise InputError(f"expected {{{name!r}: ...}}, got {type(state).__name__}", field=name)
    extra = sorted(map(str, set(state) - {name}))
    if extra:
        raise InputError(f"not a field of {owner} (it holds only {name!r})", field=extra[0])
    value = state.get(name)
    if not isinstance(value, kind):
        raise InputError("missing" if name not in state else f"expected {expected}, got {type(value).__name__}",
                         field=name)
    return value


@dataclasses.dataclass
class EstimatorConfig:
    """Base of every estimator's configuration: a dataclass that serialises to JSON."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


class Estimator(abc.ABC):
    """Protocol of SPEC §3: ``token_advantages`` and ``state_values`` on a RolloutGroup.

    Subclasses set ``config_class`` (and ``label``, the name reports print) and implement
    ``_raw_advantages`` (unscaled per-token advantages, one tensor [T_i] per rollout) and
    ``state_values``; ``@register(name[, profile=...])`` sets ``name`` and ``profile``.
    Estimators are pure: no model calls, deterministic, CPU or CUDA.

    What the caller must put into the group is declared here; every consumer reads it through
    :func:`needs` and :func:`refusal`, never by name:

    - ``needs_hidden``: ``Rollout.hidden`` holds the hidden states of layer
      :meth:`hidden_layer` for prompt + completion tokens;
    - ``needs_text``: ``Rollout.completion_text`` and ``Rollout.offsets`` are filled;
    - ``needs_continuations``: Monte-Carlo continuation rewards arrive with the states or in
      ``RolloutGroup.continuations`` (only SVEB samples them; training cannot).

    Two needs are protocols of their own, whose methods the caller calls: an estimator that reads
    a learned critic the caller hands over is a :class:`ReadsCritic`, one that fits a value
    model on other groups' rollouts a :class:`LearnsAcrossGroups`.

    Defaults a trainer uses when the recipe names none: ``default_scale`` (None: the scaling the
    loss declares, SPEC §5) and :meth:`default_gae_lambda`.
    """

    name: ClassVar[str] = ""
    profile: ClassVar[str] = "default"
    label: ClassVar[str] = ""
    config_class: ClassVar[type] = EstimatorConfig
    needs_hidden: ClassVar[bool] = False
    needs_text: ClassVar[bool] = False
    needs_continuations: ClassVar[bool] = False
    default_scale: ClassVar[Optional[str]] = None
    #: relative depth of the hidden layer that a None ``layer`` resolves to (:meth:`hidden_layer`)
    layer_depth: ClassVar[float] = 1.0
    #: for a profile that reproduces a public implementation number for number (its training
    #: and SVEB rules included, which disagree there), where that implementation is; such a
    #: profile is exempt from the value/advantage identity (docs/estimators.md)
    reproduces: ClassVar[str] = ""

    def __init__(self, config: Optional[EstimatorConfig] = None, **overrides: Any):
        config = config or self.config_class()
        valid = {f.name for f in dataclasses.fields(config)}
        unknown = sorted(set(overrides) - valid)
        if unknown:
            raise InputError(f"unknown parameter(s) {', '.join(unknown)} for estimator {self.name!r}; "
                             f"valid: {', '.join(sorted(valid - {'profile'}))}")
        if "profile" in valid:
            if overrides.get("profile", self.profile) != self.profile:
                raise InputError(f"profile {overrides['profile']!r} given to the {self.profile!r} profile of "
                                 f"{self.name!r}; use get({self.name!r}, profile=...)")
            overrides["profile"] = self.profile
        self.config = dataclasses.replace(config, **overrides) if overrides else config

    def hidden_layer(self, num_layers: Optional[int] = None) -> int:
        """The hidden layer the caller extracts when ``needs_hidden`` (transformers'
        ``hidden_states[layer]``, counted from the end: −1 the last, after the final norm; SPEC
        §4.3): the config's ``layer``, or, where it is None (the default profiles' rule,
        docs/estimators.md "Structure rule"), the layer at the class's ``layer_depth`` of a
        model of ``num_layers`` decoder layers (:func:`layer_at_depth`). A ValueError when the
        rule applies and ``num_layers`` is not given."""
        layer = getattr(self.config, "layer", -1)
        if layer is not None:
            return int(layer)
        if num_layers is None:
            raise ValueError(f"{self.name} picks its hidden layer by relative depth ({self.layer_depth:g}): pass the "
                             "model's number of decoder layers to hidden_layer(num_layers), or set layer=")
        return layer_at_depth(num_layers, self.layer_depth)

    def value_points(self, group: RolloutGroup) -> list[list[int]]:
        """For every rollout of ``group``, the states t < T whose value the advantage chain reads
        (docs/estimators.md "The value/advantage identity"): with λ = 1 and no scaling, every
        token from one such point up to the next gets A = R_i − V(i, point), with V(i, point)
        what :meth:`state_values` gives at that state. Default: every state 0 … T − 1 (an
        estimator with a value per token, or one whose values are constant between its
        points)."""
        return [list(range(len(r.completion_ids))) for r in group.rollouts]

    def state_dict(self) -> Optional[dict[str, Any]]:
        """What this estimator has learned across calls and a checkpoint keeps, as tensors and
        numbers (SPEC §9: a resumed run continues where it stopped; the probe's history of
        recent batches); None for an estimator that keeps nothing (the default)."""
        return None

    def load_state_dict(self, state: dict[str, Any], *, hidden_size: Optional[int] = None) -> None:
        """Restore what :meth:`state_dict` gave, read back from a checkpoint and so
        checked first: a state that is not exactly what this estimator writes is an InputError
        naming the field; ``hidden_size``, when given, is the width of the policy's hidden states
        (what a probe's features must have). The default keeps nothing, and a ValueError says so
        for a non-empty ``state`` (another estimator's)."""
        if state:
            raise ValueError(f"estimator {self.name!r} keeps no state, got one with {', '.join(sorted(state))}")

    def resolved(self, group: RolloutGroup) -> dict[str, Any]:
        """The structural parameters this estimator resolves per group from what it is given
        (docs/estimators.md "Structure rule"; e.g. Hista's ``interval`` and ``stride``), as
        recorded in SVEB results and training logs; empty for an estimator without such a
        rule."""
        return {}

    def represent(self, rollout: Rollout) -> Optional[tuple[torch.Tensor, int]]:
        """For an estimator that reads hidden states through a per-sequence representation: that
        representation of ``rollout`` and how many of its leading vectors depend
        on the prompt alone (the same for every rollout of a group), so that a trainer can
        compute it where the rollout lies and send only the rest. None (the default): the
        estimator reads the hidden states themselves."""
        return None

    def default_gae_lambda(self) -> float:
        """The ``gae_lambda`` a trainer passes to :meth:`token_advantages` when the recipe sets
        none (SPEC §3): 1.0."""
        return 1.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"

    def token_advantages(
        self, group: RolloutGroup, *, gae_lambda: float = 1.0, scale: str = "group", batch_std: Optional[float] = None
    ) -> list[torch.Tensor]:
        """Per-token advantages of every rollout of ``group``: a list of float32 tensors,
        ``adv[i].shape == (len(group.rollouts[i].completion_ids),)`` (SPEC §3-4). A NaN or
        infinite reward in the group raises ValueError naming ``rewards``."""
        if not 0.0 <= gae_lambda <= 1.0:
            raise ValueError(f"gae_lambda must lie in [0, 1], got {gae_lambda}")
        if scale not in SCALES:
            raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
        if len(group.rollouts) == 0:
            return []
        rewards = check_finite(group.rewards, "rewards")
        raw = self._raw_advantages(group, gae_lambda)
        return _scale(raw, rewards, scale, batch_std)

    @abc.abstractmethod
    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """Unscaled per-token advantages, one float32 tensor [T_i] per rollout."""

    @abc.abstractmethod
    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """V at each state (SPEC §3): a float32 tensor [len(states)]."""

    def to_dict(self) -> dict[str, Any]:
        """The estimator's name and full configuration (recorded in result files)."""
        return {"name": self.name, "config": self.config.to_dict()}

    def method_label(self) -> str:
        """What reports call this estimator: its label, with the profile when not the
        default."""
        label = self.label or self.name
        return label if self.profile == "default" else f"{label}-{self.profile}"


class ReadsCritic(Estimator):
    """An estimator whose values come from a learned critic that the caller hands over with
    :meth:`use_critic` (SPEC §4.5: PPO-1, PPO-N, the PPO baseline). ``trains_with_policy``: that
    critic is trained alongside the policy, so only a trainer can provide it (SPEC §9: the
    trainer copies it from the policy and updates it every generation batch); SVEB cannot."""

    trains_with_policy: ClassVar[bool] = False

    @abc.abstractmethod
    def use_critic(self, critic: Any) -> "ReadsCritic":
        """Read values from ``critic`` (an object with ``values(prompt_ids, completion_ids,
        terminal=..., batch_size=...)``); returns self."""


def critic_trains_with_policy(est: Estimator) -> bool:
    """Whether ``est`` reads a critic that only a trainer can provide, trained alongside the policy
    (the PPO baseline, SPEC §4.5, §9)."""
    return isinstance(est, ReadsCritic) and est.trains_with_policy


class LearnsAcrossGroups(Estimator):
    """An estimator that fits a value model on *other* groups' rollouts (the probe,
    docs/estimators.md "Probe"): a trainer hands it each generation batch through
    :meth:`for_batch`, SVEB cross-fits it by problem from :meth:`data` and :meth:`fitted`
    (:mod:`hista.sveb.fits`)."""

    @abc.abstractmethod
    def data(self, group: RolloutGroup) -> Any:
        """What a fit reads of ``group``; the data of several groups add up with ``+``."""

    @abc.abstractmethod
    def data_key(self) -> tuple:
        """The parameters :meth:`data` depends on: estimators that agree on them share one pass."""

    @abc.abstractmethod
    def fitted(self, data: Any) -> "LearnsAcrossGroups":
        """A copy of this estimator fitted on ``data``, the rollouts of other groups."""

    @abc.abstractmethod
    def for_batch(self, groups: Sequence[RolloutGroup]) -> list["LearnsAcrossGroups"]:
        """One fitted copy per group of a training batch, each fitted without its own group."""



@dataclasses.dataclass(frozen=True)
class Needs:
    """What an estimator reads beyond a group's token ids and rewards: the one declaration of it,
    read off the class by :func:`needs` (its ``needs_*`` attributes and the protocols it
    follows). Every consumer asks :func:`refusal` whether it can give them."""

    text: bool = False  #: completion text and token offsets
    hidden: bool = False  #: hidden states of its layer (:meth:`Estimator.hidden_layer`)
    continuations: bool = False  #: Monte-Carlo continuation rewards of its states
    #: the critic it reads: None, "folder" (one ``hista critic train`` wrote), "policy" (trained
    #: alongside the policy: only a trainer has one) or "model" (a learned model no consumer gives)
    critic: Optional[str] = None
    across_groups: bool = False  #: fits on other groups' rollouts (:class:`LearnsAcrossGroups`)


def needs(est: Any) -> Needs:
    """The needs of ``est``, an estimator or its class."""
    cls = est if isinstance(est, type) else type(est)
    critic = None
    if issubclass(cls, ReadsCritic):
        folder = callable(getattr(cls, "critic_requirement", None))  # PPO-1/-N name the folder they read
        critic = "policy" if cls.trains_with_policy else "folder" if folder else "model"
    return Needs(text=cls.needs_text, hidden=cls.needs_hidden, continuations=cls.needs_continuations,
                 critic=critic, across_groups=issubclass(cls, LearnsAcrossGroups))


@dataclasses.dataclass(frozen=True)
class Feeds:
    """What a consumer gives an estimator besides token ids, rewards, text, hidden states and
    the batch's other groups, which every consumer gives."""

    critics: tuple[str, ...] = ()  #: the kinds of :attr:`Needs.critic` it provides
    continuations: bool = False
    text_and_hidden: bool = True  #: both for one estimator (verl's trainers capture one of them)


#: Every consumer of estimators and what it gives them (docs/estimators.md "What an estimator
#: needs"): an estimator is served where :func:`refusal` finds nothing missing.
CONSUMERS = {
    "sveb eval": Feeds(critics=("folder",), continuations=True),
    "sveb grad": Feeds(),
    "training": Feeds(critics=("policy",)),
    "token_advantages": Feeds(),
    "verl": Feeds(text_and_hidden=False),
}


def refusal(consumer: str, est: Any) -> Optional[str]:
    """What ``consumer`` (a key of :data:`CONSUMERS`) cannot give ``est`` (an estimator or its
    class), in words that follow "needs" in a message, or None when it serves it."""
    feeds, need = CONSUMERS[consumer], needs(est)
    if need.continuations and not feeds.continuations:
        return "Monte-Carlo continuations of every state"
    if need.critic is not None and need.critic not in feeds.critics:
        return "a learned model"
    if need.text and need.hidden and not feeds.text_and_hidden:
        return "both the completions' text and hidden states"
    return None
