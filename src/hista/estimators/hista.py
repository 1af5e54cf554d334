"""Hista: state values as a distance-weighted average of the rewards of similar hidden-state
prefixes in the group (SPEC §4.3; paper §5.2). The default profile, whose layer, interval and
stride follow the structure rule (docs/estimators.md "Structure rule"); the paper profile
(``get("hista", profile="paper")``, the paper's fixed structure) is
:mod:`hista.estimators.hista_paper`, the reference profile (``get("hista",
profile="reference")``) :mod:`hista.estimators.hista_reference`.

Reading order, top to bottom, follows SPEC §4.3:

0. ``rule_interval``,          the structure rule: the interval of a group (and
   ``RULE_STRIDE``,            ``RULE_STRIDE``, the stride; ``LAYER_DEPTH``, the layer) when the
   ``LAYER_DEPTH``             configuration leaves them

1. ``smooth``                  bias-corrected exponential moving average of the hidden states
2. compression                 every ``stride``-th smoothed vector (``smooth(..., stride)``)
3. ``default_nodes``,          the grid of candidate states of a rollout and the vectors that
   ``vector_count``            represent each
4. distance                    MinDistance, from :mod:`hista.estimators.min_distance`
5. ``knn_average``             the k-nearest, distance-weighted reward average at a state
6. ``Hista._raw_advantages``   GAE over the node values of each rollout
7. ``Hista.state_values``      the estimate at any state

Three coordinate systems, never mixed (the names say which one a number is in):

- **tokens** c, 0..T: completion tokens; "the state with c tokens" holds the first c completion
  tokens. ``node_tokens[i]`` are rollout i's nodes in tokens; they are the GAE segment bounds.
- **positions** n = P + c: absolute sequence positions, prompt included (hidden state n is the
  one after reading token n). Only the reference grid is defined in positions
  (``node_positions``).
- **vectors** ℓ: counts of compressed vectors, i.e. the length of the prefix E[:ℓ] that
  represents a state. ``node_vectors[i]``, ``query_vectors`` and ``vector_counts[i]`` (L_i,
  all of rollout i) are in vectors.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import torch

from ..types import Rollout, RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig, check_finite, others_mean, state_length
from .gae import segment_gae
from .min_distance import node_distances, query_distances

#: positions per block of the blocked EMA
EMA_BLOCK = 64
#: relative band around the k-th distance inside which candidates count as tied
TIE_RTOL = 1e-4

# The default profile's structure rule (docs/estimators.md "Structure rule"): what a None
# ``layer``, ``interval`` or ``stride`` resolves to. Chosen on the selection halves of the SVEB
# study (results/sveb-study): the depth in sweep-hista-rule, the interval at the paper's stride in
# sweep-hista-stride (and the default clamp, HistaConfig.min_distance, in sweep-hista-weights-s5).
# The stride and the node cap hold the work within 2× of the paper's setting (interval 50,
# stride 5) at every length: as many compressed vectors as the paper keeps, and at most
# RULE_NODES nodes per rollout or twice the paper's, whichever is more.
#: relative depth of the default hidden layer (SmolLM2's 30 layers: −8)
LAYER_DEPTH = 23 / 30
#: node spacing in tokens while a rollout holds at most RULE_NODES nodes
RULE_INTERVAL = 12
#: nodes per rollout beyond which the interval grows
RULE_NODES = 25
#: the largest interval the rule reaches (half the paper's 50: twice its nodes)
MAX_INTERVAL = 25
#: the compression stride (the paper's)
RULE_STRIDE = 5


def rule_interval(longest: int) -> int:
    """The default profile's node interval for a group whose longest completion has
    ``longest`` tokens (docs/estimators.md "Structure rule"): RULE_INTERVAL tokens, grown to
    ⌈longest / RULE_NODES⌉ when that is larger, at most MAX_INTERVAL (500 tokens: 20; from 601
    tokens on: 25)."""
    return min(MAX_INTERVAL, max(RULE_INTERVAL, -(-int(longest) // RULE_NODES)))


@dataclasses.dataclass
class HistaConfig(EstimatorConfig):
    """Parameters of Hista (SPEC §4.3); the paper's names in brackets.

    ``alpha``: EMA smoothing factor. ``stride``: keep every stride-th smoothed vector [φ,
    reference ``mean_window``]. ``interval``: node grid spacing in tokens [δ, reference
    ``min_interval``]. ``min_distance``: distances are clamped below at this value [reference
    ``min_d``]. ``max_k`` / ``min_k``: number of nearest candidates at the first / last node.
    ``power``: weights are d^(−power) [t]. ``include_self``: the scored rollout's own reward
    enters its values, through its own nodes up to the query as candidates and the group mean
    at t = 0 and as the fallback (the paper and reference profiles' rule); False (the default
    profile): its values read the other rollouts only, V(i, 0) and the fallback being their mean
    (a valid baseline, docs/estimators.md "Valid baselines"). ``include_prompt``: the
    representation starts at the first prompt token (False: at the first completion token).
    ``normalise``: divide MinDistance by the longer prefix's length. ``layer``: the hidden layer
    the caller puts into ``Rollout.hidden`` (HF ``hidden_states[layer]``, −1 = last, after the
    final norm), read through :meth:`Estimator.hidden_layer`. ``profile``: recorded, set by the
    estimator class ("default", "paper" or "reference").

    ``layer``, ``interval`` and ``stride`` left at None (the default profile) are resolved by
    the structure rule (:func:`rule_interval`, ``RULE_STRIDE``, ``LAYER_DEPTH``): the layer
    from the model's depth, the interval per group from its completion lengths, the stride 5.
    A value given explicitly always wins over the rule.
    """

    alpha: float = 0.7
    stride: Optional[int] = None
    interval: Optional[int] = None
    min_distance: float = 1.0
    max_k: int = 66
    min_k: int = 6
    power: float = 1.0
    include_self: bool = False
    include_prompt: bool = True
    normalise: bool = True
    layer: Optional[int] = None
    profile: str = "default"

    def check(self) -> None:
        """Raise a ValueError naming the first invalid parameter (ranges of SPEC §4.3; None:
        resolved by the structure rule)."""
        if not 0.0 <= self.alpha < 1.0:
            raise ValueError(f"alpha must lie in [0, 1), got {self.alpha}")
        for name in ("stride", "interval"):
            value = getattr(self, name)
            if value is not None and (int(value) != value or value < 1):
                raise ValueError(f"{name} must be a positive integer (or null: the structure rule), got {value}")
        if not (math.isfinite(self.min_distance) and self.min_distance > 0):
            raise ValueError(f"min_distance must be a positive number, got {self.min_distance}")
        if int(self.min_k) != self.min_k or int(self.max_k) != self.max_k or not 1 <= self.min_k <= self.max_k:
            raise ValueError(f"need integers 1 <= min_k <= max_k, got min_k={self.min_k}, max_k={self.max_k}")
        if not (math.isfinite(self.power) and self.power >= 0):
            raise ValueError(f"power must be a non-negative number, got {self.power}")


@dataclasses.dataclass
class HistaPaperConfig(HistaConfig):
    """The paper's published structure (SPEC §4.3; paper §6: the last layer, interval 50,
    stride 5), the reference's clamp (``min_d`` 5) and the paper's own nodes and group mean
    (``include_self``, which reads R_i: kept for reproduction), computed with the default
    profile's definitions: ``get("hista", profile="paper")``, the default profile before the
    structure rule and issue 63's fix."""

    stride: Optional[int] = 5
    interval: Optional[int] = 50
    min_distance: float = 5.0
    include_self: bool = True
    layer: Optional[int] = -1
    profile: str = "paper"


# --- 1-2. smoothing and compression -------------------------------------------------------


def smooth(hidden: torch.Tensor, alpha: float, stride: int = 1) -> torch.Tensor:
    """Bias-corrected exponential moving average over positions (SPEC §4.3 steps 1-2), float32:
    m_{-1} = 0, m_k = α·m_{k-1} + (1 − α)·x_k, e_k = m_k / (1 − α^{k+1}) (so e_0 = x_0), kept at
    positions 0, stride, 2·stride, … only.

    Computed blockwise: one matmul per block of about ``EMA_BLOCK`` positions (aligned with the
    stride) gives the kept positions and the block's last one, a carry joins the blocks. A
    tensor with non-finite entries takes the exact sequential loop so that a NaN never leaks
    into earlier positions of its block.
    """
    x = hidden.to(torch.float32)
    n = x.shape[0]
    if n == 0:
        return x.clone()
    if bool(torch.isfinite(x.sum())):  # NaN/inf anywhere (or an overflowing sum) -> exact loop
        m = _ema_blocked(x, alpha, stride)
    else:
        m = _ema_sequential(x, alpha)[::stride]
    steps = torch.arange(1, n + 1, stride, dtype=torch.float64, device=x.device)
    return m / (1.0 - alpha**steps).to(torch.float32)[:, None]


def _ema_blocked(x: torch.Tensor, alpha: float, stride: int) -> torch.Tensor:
    n, width = x.shape
    size = stride * max(1, EMA_BLOCK // stride)
    blocks = -(-n // size)
    padded = torch.zeros(blocks * size, width, dtype=x.dtype, device=x.device)
    padded[:n] = x
    r = torch.arange(size, dtype=torch.float64, device=x.device)
    wanted = torch.cat([r[::stride], r[-1:]]).long()  # kept positions + the carry position
    lag = r[wanted, None] - r[None, :]
    # weight of x_{s+q} in m_{s+r} inside one block: (1 − α) α^{r−q} for q <= r
    within = torch.where(lag >= 0, (1 - alpha) * alpha ** lag.clamp_min(0), torch.zeros_like(lag))
    local = within.to(x.dtype) @ padded.view(blocks, size, width)
    carry_weight = (alpha ** (r[wanted] + 1)).to(x.dtype)[:, None]
    carry = torch.zeros(width, dtype=x.dtype, device=x.device)
    for b in range(blocks):
        local[b] += carry_weight * carry
        carry = local[b, -1]
    return local[:, :-1].reshape(-1, width)[: -(-n // stride)]


def _ema_sequential(x: torch.Tensor, alpha: float) -> torch.Tensor:
    m = torch.empty_like(x)
    running = torch.zeros_like(x[0])
    for k in range(x.shape[0]):
        running = alpha * running + (1 - alpha) * x[k]
        m[k] = running
    return m


# --- 3. nodes ------------------------------------------------------------------------------


def default_nodes(length: int, interval: int) -> list[int]:
    """Node tokens of a completion of ``length`` tokens (SPEC §4.3 default profile): c = 0,
    interval, 2·interval, … < T, and c = T. Node c is the state holding c tokens."""
    return sorted(set(range(0, length, interval)) | {length})


def vector_count(prompt_len: int, c: int, stride: int, include_prompt: bool) -> int:
    """ℓ(c), the number of compressed vectors representing the state with c tokens (SPEC §4.3
    default profile): positions start..P+c−1 (start = 0, or P without the prompt), i.e.
    ⌊(P+c−1−start)/stride⌋ + 1 (0: an empty representation)."""
    start = 0 if include_prompt else prompt_len
    return max(0, (prompt_len + c - 1 - start) // stride + 1)


# --- 5. estimates --------------------------------------------------------------------------


def knn_average(dist: torch.Tensor, valid: torch.Tensor, rewards: torch.Tensor, k: torch.Tensor,
                min_distance: float, power: float, fallback: torch.Tensor | float) -> torch.Tensor:
    """Estimate per query row (SPEC §4.3 step 5), ``dist``/``valid`` [Q, N], ``rewards`` [N],
    ``k`` [Q]: NaN distances count as +inf, distances are clamped below at ``min_distance``, the
    k nearest valid candidates (k capped at their number) get weights d^(−power) (0 at +inf),
    V = Σ w r / Σ w, or ``fallback`` ([Q] or one number: V(0) of the query's rollout) when every
    weight is 0. Candidates within a relative ``TIE_RTOL`` of the k-th distance share the
    remaining places equally (the mean over tie-breaking orders), so that the estimate does not
    depend on the order of the rollouts or on rounding noise. Non-finite ``rewards`` raise
    ValueError naming ``rewards``."""
    check_finite(rewards, "rewards")
    inf = torch.tensor(float("inf"), device=dist.device)
    d = torch.where(torch.isnan(dist), inf, dist).clamp_min(min_distance)
    d = torch.where(valid, d, inf)
    k = torch.minimum(k, valid.sum(dim=1))
    width = int(k.max().clamp_min(1)) if k.numel() else 1  # the kmax smallest distances, not a full sort
    kth = d.topk(width, dim=1, largest=False).values.gather(1, (k - 1).clamp_min(0)[:, None])
    closer = d < kth * (1 - TIE_RTOL)
    tied = (d >= kth * (1 - TIE_RTOL)) & (d <= kth * (1 + TIE_RTOL))
    free = (k[:, None] - closer.sum(dim=1, keepdim=True)).clamp_min(0)
    share = free / tied.sum(dim=1, keepdim=True).clamp_min(1)
    chosen = (closer.to(d.dtype) + tied.to(d.dtype) * share) * valid
    weights = torch.where(torch.isfinite(d), d.pow(-power), torch.zeros_like(d)) * chosen
    total = weights.sum(dim=1)
    fallback = torch.as_tensor(fallback, dtype=d.dtype, device=d.device).expand(d.shape[0])
    # centred on the fallback so that equal rewards give exactly that reward
    spread = (weights * (rewards - fallback[:, None])).sum(dim=1) / total.clamp_min(torch.finfo(d.dtype).tiny)
    return torch.where(total > 0, fallback + spread, fallback)


# --- 6-7. the estimator --------------------------------------------------------------------


@dataclasses.dataclass
class PreparedGroup:
    """A group after SPEC §4.3 steps 1-3: compressed vectors and node grids (coordinates in the
    module docstring)."""

    vectors: list[torch.Tensor]  # compressed smoothed vectors per rollout [L_i, H]
    stride: int  # the compression stride, resolved for this group
    stacked: torch.Tensor  # the same, stacked and zero-padded [G, Lmax, H]
    node_tokens: list[list[int]]  # nodes of each rollout in tokens c (the GAE segment bounds)
    node_vectors: list[list[int]]  # nodes of each rollout in vectors ℓ (prefix lengths)
    rewards: torch.Tensor  # [G] float32
    mean: float  # group mean reward: V(0) and the fallback of an external prefix
    starts: torch.Tensor  # [G] V(i, 0): rollout i's chain start and the fallback of its queries

    @property
    def vector_counts(self) -> list[int]:
        """L_i, the number of compressed vectors of every rollout (SPEC §4.3 step 2)."""
        return [int(e.shape[0]) for e in self.vectors]

    def node_rewards(self) -> torch.Tensor:
        """The reward of each node's rollout [N], nodes numbered rollout by rollout (SPEC §4.3
        step 5: r is the final reward of the candidate's rollout)."""
        return torch.cat([self.rewards[i].expand(len(n)) for i, n in enumerate(self.node_tokens)])

    def node_owner(self) -> torch.Tensor:
        """The rollout of each node [N] (SPEC §4.3 step 5: candidates of other rollouts)."""
        return torch.cat([torch.full((len(n),), i) for i, n in enumerate(self.node_tokens)]).to(self.rewards.device)

    def node_start(self, i: int) -> int:
        """Number of the first node of rollout i (SPEC §4.3 step 3, nodes rollout by rollout)."""
        return sum(len(n) for n in self.node_tokens[:i])


def _check_hidden(rollouts: Sequence[Rollout], where: str) -> None:
    """Every rollout must carry hidden states of shape [P + T, H] with one H (SPEC §3);
    checked here too because ``Rollout.hidden`` can be assigned after construction."""
    width = None
    for i, r in enumerate(rollouts):
        name = f"{where}[{i}]"
        if r.hidden is None:
            raise ValueError(f"Hista needs hidden states: {name}.hidden is None (put one layer's hidden states "
                             f"for prompt + completion tokens into Rollout.hidden)")
        expected = len(r.prompt_ids) + len(r.completion_ids)
        if r.hidden.dim() != 2 or r.hidden.shape[0] != expected:
            raise ValueError(f"{name}.hidden has shape {tuple(r.hidden.shape)}; expected [{expected}, H] "
                             f"(prompt {len(r.prompt_ids)} + completion {len(r.completion_ids)} tokens)")
        if width is not None and r.hidden.shape[1] != width:
            raise ValueError(f"{name}.hidden has width {r.hidden.shape[1]} but earlier rollouts have {width}")
        width = r.hidden.shape[1]


@register("hista")
class Hista(Estimator):
    """Hidden-state weighted average (SPEC §4.3): V at a node is the distance-weighted mean
    reward of the k nearest nodes of the group, the distance being MinDistance between smoothed,
    compressed hidden-state prefixes; advantages are GAE over the nodes of each rollout.

    ``get("hista", **overrides)``. Outputs live on the device of the hidden states (those of the
    first rollout). The reference profile overrides the hooks ``_compress``, ``_nodes``,
    ``_group_mean``, ``_node_values``, ``_advantages`` and ``_state_values``."""

    label = "Hista"
    config_class = HistaConfig
    needs_hidden = True
    layer_depth = LAYER_DEPTH

    def __init__(self, config: Optional[HistaConfig] = None, **overrides):
        super().__init__(config, **overrides)
        self.config.check()

    # --- the structure rule

    def structure(self, rollouts: Sequence[Rollout]) -> tuple[int, int]:
        """(interval, stride) for a group of ``rollouts``: the configured values, or where one
        is None the structure rule, the interval from the group's longest completion
        (:func:`rule_interval`, ``RULE_STRIDE``; docs/estimators.md "Structure rule")."""
        cfg = self.config
        longest = max((len(r.completion_ids) for r in rollouts), default=0)
        interval = cfg.interval if cfg.interval is not None else rule_interval(longest)
        return int(interval), int(self.stride)

    @property
    def stride(self) -> int:
        """The compression stride: the configured one, or the rule's ``RULE_STRIDE``."""
        return int(self.config.stride if self.config.stride is not None else RULE_STRIDE)

    def resolved(self, group: RolloutGroup) -> dict:
        """The interval and stride used for ``group`` (docs/estimators.md "Structure rule": the
        configured values or what the rule gave), as SVEB results and training logs record
        them."""
        interval, stride = self.structure(group.rollouts)
        return {"interval": interval, "stride": stride}

    # --- steps 1-3: representations and nodes

    def compress(self, hidden: torch.Tensor, prompt_len: int, stride: int) -> torch.Tensor:
        """Smoothed, compressed vectors [L, H] float32 of one sequence's hidden states
        ``hidden`` [P + T, H] whose prompt holds ``prompt_len`` tokens (SPEC §4.3 steps 1-2),
        at compression stride ``stride``: exact per sequence, so a trainer can compute it where
        the sequence lies (``hista.integrations.verl_hidden``)."""
        start = 0 if self.config.include_prompt else int(prompt_len)
        return smooth(hidden[start:], self.config.alpha, stride)

    def _represent(self, rollout: Rollout, device: torch.device, stride: int) -> torch.Tensor:
        """Smoothed, compressed vectors of one rollout (SPEC §4.3 steps 1-2) [L, H]."""
        return self.compress(rollout.hidden.to(device), len(rollout.prompt_ids), stride)

    def _compress(self, rollouts: Sequence[Rollout], device: torch.device, stride: int) -> list[torch.Tensor]:
        """The compressed vectors of every rollout (SPEC §4.3 steps 1-2)."""
        return [self._represent(r, device, stride) for r in rollouts]

    def represent(self, rollout: Rollout) -> Optional[tuple[torch.Tensor, int]]:
        """The smoothed, strided vectors of one rollout (SPEC §4.3 steps 1-2; the EMA runs
        along one sequence, so this is exact per rollout) and how many of them cover prompt
        positions only (0 when the representation starts at the completion)."""
        _check_hidden([rollout], "rollout")
        stride = self.stride
        shared = (len(rollout.prompt_ids) - 1) // stride + 1 if self.config.include_prompt else 0
        return self._represent(rollout, rollout.hidden.device, stride), max(shared, 0)

    def _nodes(self, rollout: Rollout, vector_total: int, interval: int, stride: int) -> tuple[list[int], list[int]]:
        """The nodes of one rollout in tokens and in vectors (SPEC §4.3 step 3); ``vector_total``
        is the rollout's number of compressed vectors (the reference profile clips to it)."""
        p, t = len(rollout.prompt_ids), len(rollout.completion_ids)
        tokens = default_nodes(t, interval)
        return tokens, [vector_count(p, c, stride, self.config.include_prompt) for c in tokens]

    def value_points(self, group: RolloutGroup) -> list[list[int]]:
        """Each rollout's interior nodes and 0 (docs/estimators.md "The value/advantage
        identity"): the states whose values the GAE of SPEC §4.3 step 6 reads."""
        interval, _ = self.structure(group.rollouts)
        return [default_nodes(len(r.completion_ids), interval)[:-1] for r in group.rollouts]

    def _group_mean(self, rewards: torch.Tensor) -> float:
        """The group mean; exactly r when every reward is r."""
        return float(rewards[0] + (rewards - rewards[0]).mean())

    def _start_values(self, rewards: torch.Tensor, mean: float) -> torch.Tensor:
        """V(i, 0) of every rollout [G], its chain's start and the fallback of its queries: the
        mean of the *other* rollouts' rewards (docs/estimators.md "Valid baselines"), or with
        ``include_self`` the group ``mean``. A group of one, which has no others, keeps the
        group mean, its own reward (advantage 0, as ``grpo?leave_one_out=true``). Exactly r
        when every reward is r."""
        if self.config.include_self:
            return torch.full_like(rewards, mean)
        return others_mean(rewards)

    def _prepare(self, group: RolloutGroup) -> PreparedGroup:
        """Steps 1-3 for the whole group: its compressed vectors, node grids and mean reward,
        with the interval and stride resolved for the group (:meth:`structure`)."""
        interval, stride = self.structure(group.rollouts)
        if group.representations is not None:  # computed where the rollouts lay (Estimator.represent)
            vectors = list(group.representations)
            device = vectors[0].device
        else:
            _check_hidden(group.rollouts, "group.rollouts")
            device = group.rollouts[0].hidden.device
            vectors = self._compress(group.rollouts, device, stride)
        stacked = torch.zeros(len(vectors), max(int(e.shape[0]) for e in vectors), vectors[0].shape[1], device=device)
        for i, e in enumerate(vectors):
            stacked[i, : e.shape[0]] = e
        node_tokens, node_vectors = [], []
        for r, e in zip(group.rollouts, vectors):
            tokens, counts = self._nodes(r, int(e.shape[0]), interval, stride)
            node_tokens.append(tokens)
            node_vectors.append(counts)
        rewards = check_finite(group.rewards, "rewards").to(device)
        mean = self._group_mean(rewards)
        return PreparedGroup(vectors, stride, stacked, node_tokens, node_vectors, rewards, mean,
                             self._start_values(rewards, mean))

    # --- step 5: estimates at nodes

    def _k(self, c: int, length: int) -> int:
        """k(c) = round(max_k − (max_k − min_k)·c/T) (SPEC §4.3 default profile)."""
        cfg = self.config
        return int(round(cfg.max_k - (cfg.max_k - cfg.min_k) * (c / length if length else 0.0)))

    def _candidates(self, prep: PreparedGroup, owners: Sequence[Optional[int]], tokens: Sequence[int]) -> torch.Tensor:
        """Valid candidate nodes [Q, N] for queries at ``tokens`` of the rollouts ``owners``
        (None: an external prefix): every non-empty node of the other rollouts, and the owner's
        own nodes with c' <= c when ``include_self`` (SPEC §4.3)."""
        device = prep.rewards.device
        node_vectors = torch.as_tensor([n for counts in prep.node_vectors for n in counts], device=device)
        node_tokens = torch.as_tensor([c for nodes in prep.node_tokens for c in nodes], device=device)
        owner = torch.as_tensor([-1 if o is None else o for o in owners], device=device)[:, None]
        query_tokens = torch.as_tensor(list(tokens), device=device)[:, None]
        other = prep.node_owner()[None, :] != owner
        own_before = (node_tokens[None, :] <= query_tokens) & self.config.include_self
        return (node_vectors[None, :] > 0) & (other | own_before)

    def _node_values(self, prep: PreparedGroup) -> list[torch.Tensor]:
        """V at the interior nodes (0 < c < T) of every rollout (SPEC §4.3 step 5)."""
        table = node_distances(prep.stacked, prep.vector_counts, prep.node_vectors, self.config.normalise)
        queries, owners, tokens, ks = [], [], [], []
        for i, nodes in enumerate(prep.node_tokens):
            for j, c in enumerate(nodes):
                if 0 < c < nodes[-1]:
                    queries.append(prep.node_start(i) + j)
                    owners.append(i)
                    tokens.append(c)
                    ks.append(self._k(c, nodes[-1]))
        owners_t = torch.as_tensor(owners, dtype=torch.long, device=table.device)
        values = knn_average(table[queries], self._candidates(prep, owners, tokens), prep.node_rewards(),
                             torch.as_tensor(ks, dtype=torch.long, device=table.device),
                             self.config.min_distance, self.config.power, prep.starts[owners_t])
        return [values[owners_t == i] for i in range(len(prep.node_tokens))]

    # --- step 6: advantages

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """GAE over each rollout's nodes (SPEC §4.3 step 6); scaling by the group std happens in
        the base class."""
        prep = self._prepare(group)
        values = self._node_values(prep)
        return [self._advantages(prep, i, values[i], len(r.completion_ids), gae_lambda).to(prep.rewards.device)
                for i, r in enumerate(group.rollouts)]

    def _advantages(self, prep: PreparedGroup, i: int, values: torch.Tensor, length: int,
                    gae_lambda: float) -> torch.Tensor:
        """Rollout i's advantages [T] from its interior node values: V_0 = ``prep.starts[i]``,
        the node values, V_{K+1} = R_i, segment j = tokens [c_{j−1}, c_j) (SPEC §4.3 step 6)."""
        if length == 0:
            return torch.zeros(0)
        chain = torch.cat([prep.starts[i : i + 1].cpu(), values.cpu(), prep.rewards[i : i + 1].cpu()])
        return segment_gae(prep.node_tokens[i], chain, length, gae_lambda)

    # --- step 7: state values

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """V at each state (SPEC §4.3 step 7), a float32 tensor [len(states)] on the hidden
        states' device."""
        if len(group.rollouts) == 0:
            raise ValueError("Hista state values need a non-empty group")
        return self._state_values(group, self._prepare(group), states)

    def _state_values(self, group: RolloutGroup, prep: PreparedGroup, states: Sequence[State]) -> torch.Tensor:
        """The estimate at each state's exact prefix with the node rules (SPEC §4.3 step 7):
        V(0) = ``prep.starts``, V(T) = R_i, k(t), candidates and fallback as for a node at t. An
        external ``State.prefix`` is evaluated as a whole against every node of the group (the
        group mean its fallback), with k from its length relative to ``State.rollout``'s length
        (the group's mean length when that is None)."""
        out = torch.empty(len(states), device=prep.rewards.device)
        queries: dict[tuple, list[tuple[int, int]]] = {}  # (rollout, prefix id) -> [(state index, c)]
        prefixes: dict[int, State] = {}
        for s_index, s in enumerate(states):
            if s.prefix is not None:
                c = len(s.prefix.completion_ids)
                if s.t not in (0, c):
                    raise ValueError(f"states[{s_index}]: t={s.t} but the prefix has {c} completion tokens; an "
                                     f"external prefix is evaluated as a whole (leave t at 0 or set it to {c})")
                _check_hidden([s.prefix], f"states[{s_index}].prefix")
                prefixes[id(s.prefix)] = s
                queries.setdefault((s.rollout, id(s.prefix)), []).append((s_index, c))
                continue
            length = state_length(group, s, s_index)
            if s.t == length:
                out[s_index] = prep.rewards[s.rollout]
            elif s.t == 0:
                out[s_index] = prep.starts[s.rollout]
            else:
                queries.setdefault((s.rollout, None), []).append((s_index, s.t))
        mean_length = sum(len(r.completion_ids) for r in group.rollouts) / len(group.rollouts)
        for (i, prefix_id), items in queries.items():
            tokens = [c for _, c in items]
            if prefix_id is None:
                owner, query, sequence = i, prep.vectors[i], group.rollouts[i]
                length = len(sequence.completion_ids)
            else:
                owner, sequence = None, prefixes[prefix_id].prefix
                query = self._represent(sequence, prep.rewards.device, prep.stride)
                length = len(group.rollouts[i].completion_ids) if i is not None else mean_length
            query_vectors = [vector_count(len(sequence.prompt_ids), c, prep.stride, self.config.include_prompt)
                             for c in tokens]
            dist = query_distances(query, query_vectors, prep.stacked, prep.vector_counts, prep.node_vectors,
                                   self.config.normalise)
            ks = [self._k(min(c, length), length) for c in tokens]
            values = knn_average(dist, self._candidates(prep, [owner] * len(tokens), tokens),
                                 prep.node_rewards(), torch.as_tensor(ks, dtype=torch.long, device=dist.device),
                                 self.config.min_distance, self.config.power,
                                 prep.mean if owner is None else prep.starts[owner])
            for (s_index, _), v in zip(items, values):
                out[s_index] = v
        return out
