"""Probe: state values from a ridge regression on the policy's own hidden states, fitted on the
rollouts of *other* prompts (docs/estimators.md "Probe"; after POISE, arXiv 2605.07579, which
values states with a lightweight probe on the policy's hidden states).

Reading order:

1. ``features``      a rollout's state features: the smoothed hidden state at each state's last
                     token (Hista's EMA, :func:`hista.estimators.hista.smooth`)
2. ``ProbeData``     what a fit needs of some rollouts: weighted sums of features, their outer
                     products, rewards and their products (sufficient statistics), added up
3. ``ridge``         the closed-form ridge solution on standardised features
4. ``Probe``         V(i, t) = the others' mean (+ the probe's prediction) at every state; per-token
                     GAE over those values; ``for_batch`` fits each group of a training batch on
                     the others and a buffer of recent batches

No rollout's own reward enters its own value: a fit never sees the group it scores (training:
the other groups of the batch and earlier batches; SVEB: the other folds of problems,
:mod:`hista.sveb.fits`), and the offset of rollout i is the mean of the *other* rewards (the
leave-one-out baseline at t = 0, as for Numca and Hista).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import torch

from ..errors import InputError
from ..schema import fields
from ..types import RolloutGroup, State
from . import register
from .base import EstimatorConfig, LearnsAcrossGroups, check_finite, others_mean, state_field, state_length
from .gae import segment_gae
from .hista import smooth

OFFSETS = ("others_mean", "group_mean", "none")
#: relative depth of the default layer, chosen on the SVEB study's selection halves (SmolLM2: −12)
PROBE_DEPTH = 19 / 30
#: states per rollout a fit reads at most (evenly spaced), so that 4,096-token rollouts stay cheap
MAX_FIT_STATES = 256
#: smallest feature standard deviation a dimension is scaled by (a constant dimension stays 0)
MIN_SCALE = 1e-6


@dataclasses.dataclass
class ProbeConfig(EstimatorConfig):
    """Parameters of the probe (docs/estimators.md "Probe").

    ``layer``: the hidden layer read (None: the structure rule's relative depth, as Hista).
    ``alpha``: EMA smoothing factor of the hidden states along the sequence (0: the raw state).
    ``ridge``: the ridge penalty on standardised features, in rollouts (a fit on n rollouts
    shrinks by ridge / n). ``offset``: ``"others_mean"`` fits R_i − (the mean of the other
    rollouts' rewards) and adds the probe's prediction to that leave-one-out mean, so that
    V_i(s_t) never reads R_i (docs/estimators.md "Valid baselines"); ``"group_mean"`` (before
    issue 63; it reads R_i with weight 1/G) the same with the group's mean reward; ``"none"``
    fits R itself. ``buffer``: in
    training, how many earlier generation batches a fit also reads. ``profile``: recorded. The
    defaults of ``layer`` (depth), ``alpha``, ``ridge`` and ``offset`` were chosen on the
    selection halves of the SVEB study (docs/estimators.md "Probe")."""

    layer: Optional[int] = None
    alpha: float = 0.7
    ridge: float = 1000.0
    offset: str = "others_mean"
    buffer: int = 4
    profile: str = "default"

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and 0.0 <= self.alpha < 1.0):
            raise ValueError(f"alpha must lie in [0, 1), got {self.alpha!r}")
        if not (isinstance(self.ridge, (int, float)) and math.isfinite(self.ridge) and self.ridge > 0):
            raise ValueError(f"ridge must be a positive number, got {self.ridge!r}")
        if self.offset not in OFFSETS:
            raise ValueError(f"unknown offset {self.offset!r}; valid: {', '.join(OFFSETS)}")
        if isinstance(self.buffer, bool) or not isinstance(self.buffer, int) or self.buffer < 0:
            raise ValueError(f"buffer must be an integer >= 0, got {self.buffer!r}")


# --- 1. features --------------------------------------------------------------------------------


def features(hidden: torch.Tensor, prompt_len: int, alpha: float) -> torch.Tensor:
    """The features of the states t = 0 … T of one rollout [T + 1, H] float32 (docs/estimators.md
    "Probe"): state t (the prompt and t completion tokens) is read at its last token, position
    P + t − 1, from the hidden states [P + T, H] smoothed along the whole sequence by the
    bias-corrected EMA of SPEC §4.3 step 1 (``alpha`` 0: unsmoothed)."""
    smoothed = smooth(hidden, alpha, 1)
    return smoothed[max(prompt_len - 1, 0):]


def _fit_states(length: int) -> torch.Tensor:
    """The states 1 … T − 1 a fit reads of a rollout of ``length`` tokens, at most
    MAX_FIT_STATES of them, evenly spaced."""
    if length <= 1:
        return torch.zeros(0, dtype=torch.long)
    states = torch.arange(1, length)
    if states.numel() > MAX_FIT_STATES:
        states = states[torch.linspace(0, states.numel() - 1, MAX_FIT_STATES).round().long()]
    return states


# --- 2. sufficient statistics ---------------------------------------------------------------------


@dataclasses.dataclass
class ProbeData:
    """Weighted sums over the fitted states of some rollouts (docs/estimators.md "Probe"): each
    rollout weighs 1 in all, spread evenly over its states. ``weight`` = Σw (the number of
    rollouts), ``x`` = Σw·x [H], ``xx`` = Σw·x·xᵀ [H, H], ``y`` = Σw·y, ``xy`` = Σw·y·x [H]
    (float64; y the fitted target), ``low``/``high`` the range of the rewards seen. Data add
    up with ``+``; ``ProbeData.empty()`` is the zero."""

    weight: float
    x: Optional[torch.Tensor]
    xx: Optional[torch.Tensor]
    y: float
    xy: Optional[torch.Tensor]
    low: float = math.inf
    high: float = -math.inf

    @classmethod
    def empty(cls) -> "ProbeData":
        """No rollouts (the zero of ``+``)."""
        return cls(0.0, None, None, 0.0, None)

    def __add__(self, other: "ProbeData") -> "ProbeData":
        def join(a: Optional[torch.Tensor], b: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return b if a is None else a if b is None else a + b.to(a.device)

        return ProbeData(self.weight + other.weight, join(self.x, other.x), join(self.xx, other.xx),
                         self.y + other.y, join(self.xy, other.xy), min(self.low, other.low),
                         max(self.high, other.high))


def total(data: Sequence[ProbeData]) -> ProbeData:
    """The sum of ``data`` (docs/estimators.md "Probe"; ``ProbeData.empty()`` for none)."""
    out = ProbeData.empty()
    for d in data:
        out = out + d
    return out


def checked_data(entry: object, field: str, hidden_size: Optional[int] = None) -> ProbeData:
    """``entry``, a ProbeData's fields as :meth:`Probe.state_dict` wrote them, as ProbeData, or an
    InputError naming ``field`` and the key at fault: exactly the fields of
    ProbeData; ``weight`` (≥ 0) and ``y`` finite numbers, ``low`` and ``high`` numbers (±inf
    for no rollouts); ``x``, ``xy`` [H] and ``xx`` [H, H] finite float64 tensors, or all three
    None (a batch without fitted states), H = ``hidden_size`` when given, else the width of
    ``x``."""
    fields(entry, [f.name for f in dataclasses.fields(ProbeData)], what="the probe's data", field=field, prefix=field)
    for key in ("weight", "y", "low", "high"):
        _check_number(entry[key], f"{field}.{key}", finite=key in ("weight", "y"), minimum=key == "weight")
    if all(entry[key] is None for key in ("x", "xx", "xy")):
        return ProbeData(**entry)
    x = entry["x"]
    width = hidden_size if hidden_size is not None else x.shape[0] if isinstance(x, torch.Tensor) and x.dim() else 0
    for key, shape in (("x", [width]), ("xx", [width, width]), ("xy", [width])):
        _check_tensor(entry[key], f"{field}.{key}", shape)
    return ProbeData(**entry)


def _check_number(value: object, field: str, *, finite: bool, minimum: bool) -> None:
    """An InputError about ``field`` unless ``value`` is a number (not NaN; finite when
    ``finite``; ≥ 0 when ``minimum``)."""
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond any float
        number = math.nan
    if math.isnan(number):
        shown = repr(value)[:60] if isinstance(value, (float, str)) else type(value).__name__
        raise InputError(f"expected a number, got {shown}", field=field)
    if (finite and not math.isfinite(number)) or (minimum and number < 0):
        raise InputError(f"expected a finite number{' >= 0' if minimum else ''}, got {value!r}", field=field)


def _check_tensor(value: object, field: str, shape: list[int]) -> None:
    """An InputError about ``field`` unless ``value`` is a finite float64 tensor of ``shape``
    (its last size: the policy's hidden-state width)."""
    if (not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.dtype != torch.float64
            or list(value.shape) != shape):
        got = (f"a {value.dtype} {str(value.layout).replace('torch.', '')} tensor of shape {list(value.shape)}"
               if isinstance(value, torch.Tensor) else type(value).__name__)
        raise InputError(f"expected a float64 strided tensor of shape {shape} (the policy's hidden states have "
                         f"{shape[-1]} features), got {got}", field=field)
    if not bool(torch.isfinite(value).all()):
        raise InputError("holds NaN or infinite values", field=field)


# --- 3. the ridge solution ------------------------------------------------------------------------


@dataclasses.dataclass
class ProbeFit:
    """A fitted probe: prediction b + w·x, clamped to [low, high] once the offset is added."""

    w: torch.Tensor  # [H] float64
    b: float
    low: float
    high: float
    rollouts: float


def ridge(data: ProbeData, penalty: float) -> Optional[ProbeFit]:
    """The ridge regression of the target on the features (docs/estimators.md "Probe"): with the
    weighted means μ, ȳ, covariance C and cross-covariance c of ``data`` and D = diag(C)^{1/2}
    (each dimension standardised; floored at MIN_SCALE), β = (D⁻¹CD⁻¹ + (penalty / Σw)·I)⁻¹ D⁻¹c,
    w = D⁻¹β and b = ȳ − w·μ. None when ``data`` holds no rollout."""
    if data.weight <= 0 or data.xx is None:
        return None
    n = data.weight
    mean_x, mean_y = data.x / n, data.y / n
    cov = data.xx / n - torch.outer(mean_x, mean_x)
    cross = data.xy / n - mean_x * mean_y
    scale = cov.diagonal().clamp_min(0).sqrt().clamp_min(MIN_SCALE)
    standard = cov / torch.outer(scale, scale)
    standard = (standard + standard.T) / 2
    system = standard + (penalty / n) * torch.eye(standard.shape[0], dtype=standard.dtype, device=standard.device)
    beta = torch.linalg.solve(system, cross / scale)
    w = beta / scale
    return ProbeFit(w, float(mean_y - w @ mean_x), data.low, data.high, n)


# --- 4. the estimator -----------------------------------------------------------------------------


@register("probe")
class Probe(LearnsAcrossGroups):
    """State values from a linear probe on the policy's hidden states (docs/estimators.md
    "Probe"): V(i, 0) = m_i, the mean of the other rollouts' rewards, V(i, t) = m_i + b + w·x_{i,t}
    for 0 < t < T (``offset="none"``: b + w·x_{i,t}; ``"group_mean"``: m_i the group mean, as
    before issue 63), clamped to the range of the fitted rewards,
    V(i, T) = R_i; per-token advantages by GAE over those values. The fit (``ProbeFit``) comes
    from other groups: :meth:`for_batch` in training, :meth:`fitted` from
    :class:`ProbeData` (SVEB, :mod:`hista.sveb.fits`). Unfitted, the values are the group
    mean of the others, i.e. ``grpo?leave_one_out=true``."""

    label = "Probe"
    config_class = ProbeConfig
    needs_hidden = True
    layer_depth = PROBE_DEPTH

    def __init__(self, config: Optional[ProbeConfig] = None, **overrides):
        super().__init__(config, **overrides)
        self.fit: Optional[ProbeFit] = None
        self.history: list[ProbeData] = []

    # -- features and data

    def _features(self, group: RolloutGroup, i: int) -> torch.Tensor:
        """The state features [T_i + 1, H] of rollout i: ``group.representations[i]`` when the
        caller computed them where the rollout lay (:func:`features`; hista inside verl,
        ``hista.integrations.verl_hidden``), else from its hidden states (hista's TRL trainer,
        whose groups span processes, sends the probe the hidden states: it has no
        ``represent``)."""
        r = group.rollouts[i]
        if group.representations is not None:
            x = group.representations[i]
            if x.dim() != 2 or x.shape[0] != len(r.completion_ids) + 1:
                raise ValueError(f"group.representations[{i}] has shape {tuple(x.shape)}; the probe's features of a "
                                 f"rollout of {len(r.completion_ids)} tokens are [{len(r.completion_ids) + 1}, H]")
            return x
        expected = len(r.prompt_ids) + len(r.completion_ids)
        if r.hidden is None or r.hidden.dim() != 2 or r.hidden.shape[0] != expected:
            shape = None if r.hidden is None else tuple(r.hidden.shape)
            raise ValueError(f"the probe needs hidden states: group.rollouts[{i}].hidden is {shape}, expected "
                             f"[{expected}, H] (prompt + completion tokens of one layer)")
        return features(r.hidden, len(r.prompt_ids), self.config.alpha)

    def _starts(self, group: RolloutGroup) -> torch.Tensor:
        """V(i, 0) of every rollout [G] float64, also the offset its prediction is added to: the
        mean of the other rollouts' rewards, or with ``offset="group_mean"`` the group mean
        (which reads R_i with weight 1/G). Exactly r when every reward is r."""
        rewards = check_finite(group.rewards, "rewards").double()
        if self.config.offset == "group_mean":
            return torch.full_like(rewards, float(rewards[0] + (rewards - rewards[0]).mean()))
        return others_mean(rewards)

    def _offset(self, start: float) -> float:
        return 0.0 if self.config.offset == "none" else start

    def data(self, group: RolloutGroup) -> ProbeData:
        """What a fit reads of ``group`` (docs/estimators.md "Probe"): its states 1 … T − 1 (at
        most MAX_FIT_STATES per rollout), each rollout weighing 1 in all, with target R_i, or
        R_i − its offset (the mean of the other rewards, or the group mean; R_i with
        ``offset="none"``)."""
        if not group.rollouts:
            return ProbeData.empty()
        starts = self._starts(group)
        rows, weights, targets = [], [], []
        for i, r in enumerate(group.rollouts):
            states = _fit_states(len(r.completion_ids))
            if states.numel() == 0:
                continue
            x = self._features(group, i)
            rows.append(x[states.to(x.device)].double())
            weights.append(torch.full((states.numel(),), 1.0 / states.numel(), dtype=torch.float64))
            targets.append(torch.full((states.numel(),), r.reward - self._offset(float(starts[i])),
                                      dtype=torch.float64))
        rewards = [r.reward for r in group.rollouts]
        if not rows:
            return ProbeData(0.0, None, None, 0.0, None, min(rewards), max(rewards))
        x = torch.cat(rows)
        w = torch.cat(weights).to(x.device)
        y = torch.cat(targets).to(x.device)
        finite = torch.isfinite(x).all(dim=1)  # a non-finite hidden state is left out of the fit
        x, w, y = x[finite], w[finite], y[finite]
        wx = w[:, None] * x
        return ProbeData(float(w.sum()), wx.sum(dim=0), wx.T @ x, float((w * y).sum()), wx.T @ y,
                         min(rewards), max(rewards))

    # -- fits

    def data_key(self) -> tuple:
        """The parameters :meth:`data` depends on (besides the hidden layer): probes that agree
        on them can share the data of one pass (:mod:`hista.sveb.fits`)."""
        return (self.config.alpha, self.config.offset)

    def fitted(self, data: ProbeData) -> "Probe":
        """A copy of this probe fitted on ``data`` (docs/estimators.md "Probe"), the rollouts of
        other groups than those it will score; unfitted (its start values) when ``data`` holds
        no rollout."""
        out = type(self)(self.config)
        out.fit = ridge(data, self.config.ridge)
        return out

    def for_batch(self, groups: Sequence[RolloutGroup]) -> list["Probe"]:
        """One fitted probe per group of a training generation batch (docs/estimators.md
        "Probe"): group j's is fitted on every other group of the batch and on the
        last ``buffer`` batches this probe saw, never on group j itself; then the batch joins
        the history."""
        data = [self.data(g) for g in groups]
        before, after = [total(self.history)], [ProbeData.empty()]
        for d in data:
            before.append(before[-1] + d)
        for d in reversed(data):
            after.append(after[-1] + d)
        after.reverse()  # after[j] = data[j] + ... ; after[j + 1] leaves group j out
        fitted = [self.fitted(before[j] + after[j + 1]) for j in range(len(groups))]
        if self.config.buffer:
            self.history = (self.history + [total(data)])[-self.config.buffer:]
        return fitted

    def state_dict(self) -> dict:
        """The history of recent batches' data (SPEC §9: checkpoints keep it, so that a resumed
        run fits as an uninterrupted one does)."""
        return {"history": [dataclasses.asdict(d) for d in self.history]}

    def load_state_dict(self, state: dict, *, hidden_size: Optional[int] = None) -> None:
        """Restore the history :meth:`state_dict` gave, checked strictly first (it is
        read back from a checkpoint): ``{"history": [...]}`` with at most ``buffer`` batches, each
        exactly ProbeData's fields (:func:`checked_data`). Anything else is an InputError naming
        the field, and the history is left as it was."""
        history = state_field(state, "history", "the probe's state", list, "a list of batches")
        if len(history) > self.config.buffer:
            raise InputError(f"holds {len(history)} batches, more than the probe's buffer of {self.config.buffer}",
                             field="history")
        self.history = [checked_data(entry, f"history[{i}]", hidden_size) for i, entry in enumerate(history)]

    # -- values and advantages

    def _values(self, group: RolloutGroup, i: int, x: torch.Tensor, start: float) -> torch.Tensor:
        """V(i, t) for t = 0 … T_i − 1 (float64): ``start`` (:meth:`_starts`) at t = 0 and
        without a fit, else the offset plus the probe's prediction, clamped to the fitted
        rewards' range."""
        length = len(group.rollouts[i].completion_ids)
        values = torch.full((length,), start, dtype=torch.float64)
        if self.fit is None or length <= 1:
            return values
        predicted = x[1:length].double() @ self.fit.w.to(x.device) + self.fit.b
        predicted = predicted.cpu() + self._offset(start)
        predicted = torch.nan_to_num(predicted, nan=start).clamp(self.fit.low, self.fit.high)
        values[1:] = predicted
        return values

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """Per-token GAE over V(i, 0) … V(i, T − 1) and V(i, T) = R_i (docs/estimators.md
        "Probe"); the base class scales them."""
        starts = self._starts(group)
        out = []
        for i, r in enumerate(group.rollouts):
            length = len(r.completion_ids)
            if length == 0:  # a rollout left out of the loss (overlong filtering) has no tokens
                out.append(torch.zeros(0, dtype=torch.float32))
                continue
            values = self._values(group, i, self._features(group, i), float(starts[i]))
            chain = torch.cat([values, torch.tensor([r.reward], dtype=torch.float64)])
            out.append(segment_gae(list(range(length + 1)), chain, length, gae_lambda))
        return out

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """V at each state (docs/estimators.md "Probe"): the others' mean at t = 0, R_i at t = T,
        the probe's value in between; a float32 tensor [len(states)]. External prefixes are
        not supported (a ValueError)."""
        if not group.rollouts:
            raise ValueError("probe state values need a non-empty group")
        starts = self._starts(group)
        cache: dict[int, torch.Tensor] = {}
        out = []
        for k, s in enumerate(states):
            if s.prefix is not None:
                raise ValueError(f"states[{k}]: the probe evaluates states inside group rollouts only; pass "
                                 "State(rollout=i, t=t)")
            length = state_length(group, s, k)
            if s.t == length:
                out.append(group.rollouts[s.rollout].reward)
                continue
            if s.rollout not in cache:
                cache[s.rollout] = self._values(group, s.rollout, self._features(group, s.rollout),
                                                float(starts[s.rollout]))
            out.append(float(cache[s.rollout][s.t]))
        return torch.tensor(out, dtype=torch.float32)
