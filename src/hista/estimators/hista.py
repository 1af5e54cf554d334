"""Hista: state values as a distance-weighted average of the rewards of similar hidden-state
prefixes in the group (SPEC §4.3; paper §5.2).

Reading order, top to bottom, follows SPEC §4.3:

1. ``smooth``                 bias-corrected exponential moving average of the hidden states
2. compression                every ``stride``-th smoothed vector (``Hista._prepare``)
3. ``default_nodes``          the grid of candidate states of a rollout
4. ``prefix_sums``,           MinDistance between every pair of prefixes of two rollouts from
   ``node_distances``         one pairwise-distance matrix, a running min and a running sum
5. ``knn_average``            the k-nearest, distance-weighted reward average at a node
6. ``Hista``                  GAE over the node values; ``state_values`` for any state

The ``reference_*`` functions are the same steps as the reference implementation computes
them (``profile="reference"``).

``profile="reference"`` reproduces the public reference implementation
(github.com/VOXXXX1874/Hista, ``src/rl/utils/hista_utils.py`` and ``HistaTrainer``) number for
number; its differences from the default profile are listed in ``docs/estimators.md``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import torch

from ..types import Rollout, RolloutGroup, State
from . import register
from .base import Estimator, EstimatorConfig
from .gae import segment_gae

PROFILES = ("default", "reference")

#: largest pairwise-distance block (elements) held at once; bounds memory, not results
BLOCK_ELEMENTS = 1 << 24
#: positions per block of the blocked EMA
EMA_BLOCK = 64
#: relative band around the k-th distance inside which candidates count as tied (default profile)
TIE_RTOL = 1e-4


@dataclasses.dataclass
class HistaConfig(EstimatorConfig):
    """Parameters of Hista (SPEC §4.3); the paper's names in brackets.

    ``alpha``: EMA smoothing factor. ``stride``: keep every stride-th smoothed vector [φ,
    reference ``mean_window``]. ``interval``: node grid spacing in tokens [δ, reference
    ``min_interval``]. ``min_distance``: distances are clamped below at this value [reference
    ``min_d``]. ``max_k`` / ``min_k``: number of nearest candidates at the first / last node.
    ``power``: weights are d^(−power) [t]. ``include_self``: candidates include the scored
    rollout's own nodes up to the query (False: leave-one-out). ``include_prompt``: the
    representation starts at the first prompt token (False: at the first completion token).
    ``normalise``: divide MinDistance by the longer prefix's length. ``layer``: the hidden layer
    the pipeline puts into ``Rollout.hidden`` (HF ``hidden_states[layer]``, −1 = last, after the
    final norm); recorded here, read by the code that extracts hidden states, not by the math.
    ``profile``: "default" (SPEC §4.3) or "reference" (the reference implementation's quirks).
    """

    alpha: float = 0.7
    stride: int = 5
    interval: int = 50
    min_distance: float = 5.0
    max_k: int = 66
    min_k: int = 6
    power: float = 1.0
    include_self: bool = True
    include_prompt: bool = True
    normalise: bool = True
    layer: int = -1
    profile: str = "default"

    def check(self) -> None:
        """Raise a ValueError naming the first invalid parameter."""
        if self.profile not in PROFILES:
            raise ValueError(f"unknown Hista profile {self.profile!r}; valid: {', '.join(PROFILES)}")
        if not 0.0 <= self.alpha < 1.0:
            raise ValueError(f"alpha must lie in [0, 1), got {self.alpha}")
        for name in ("stride", "interval"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if not (math.isfinite(self.min_distance) and self.min_distance > 0):
            raise ValueError(f"min_distance must be a positive number, got {self.min_distance}")
        if int(self.min_k) != self.min_k or int(self.max_k) != self.max_k or not 1 <= self.min_k <= self.max_k:
            raise ValueError(f"need integers 1 <= min_k <= max_k, got min_k={self.min_k}, max_k={self.max_k}")
        if not (math.isfinite(self.power) and self.power >= 0):
            raise ValueError(f"power must be a non-negative number, got {self.power}")
        if self.profile == "reference":
            for name in ("include_self", "include_prompt", "normalise"):
                if not getattr(self, name):
                    raise ValueError(f'profile="reference" has no {name}=False (the reference implementation '
                                     f'always uses {name}=True); use profile="default"')


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


def reference_smooth(hiddens: Sequence[torch.Tensor], alpha: float) -> list[torch.Tensor]:
    """The reference implementation's EMA (profile="reference"): m_0 = x_0 (not (1 − α)·x_0),
    m_k = α·m_{k-1} + (1 − α)·x_k, still divided by (1 − α^{k+1}), so e_0 = x_0 / (1 − α).
    Same tensor operations in the same order and dtype as the reference (the rollouts stacked
    into one zero-padded batch), so that the float rounding agrees too."""
    lengths = [int(h.shape[0]) for h in hiddens]
    n = max(lengths)
    batch = torch.zeros(len(hiddens), n, hiddens[0].shape[1], dtype=hiddens[0].dtype, device=hiddens[0].device)
    for i, h in enumerate(hiddens):
        batch[i, : lengths[i]] = h
    out = torch.zeros_like(batch)
    powers = torch.pow(alpha, torch.arange(1, n + 1, device=batch.device))
    ema = None
    for k in range(n):
        ema = batch[:, k] if k == 0 else alpha * ema + (1 - alpha) * batch[:, k]
        out[:, k] = ema / (1 - powers[k])
    return [out[i, :size] for i, size in enumerate(lengths)]


# --- 3. nodes ------------------------------------------------------------------------------


def default_nodes(length: int, interval: int) -> list[int]:
    """Node positions of a completion of ``length`` tokens (SPEC §4.3 default profile): c = 0,
    interval, 2·interval, … < T, and c = T. Position c is the state holding c tokens."""
    return sorted(set(range(0, length, interval)) | {length})


def default_prefix_length(prompt_len: int, c: int, stride: int, include_prompt: bool) -> int:
    """Number of compressed vectors representing the state with c completion tokens: positions
    start..P+c−1 (start = 0, or P without the prompt), i.e. ⌊(P+c−1−start)/stride⌋ + 1
    (0: empty representation)."""
    start = 0 if include_prompt else prompt_len
    return max(0, (prompt_len + c - 1 - start) // stride + 1)


def reference_nodes(prompt_len: int, length: int, interval: int) -> list[int]:
    """Node positions of the reference implementation, as absolute token positions (prompt
    included). Its grid is anchored at the first prompt token: multiples of ``interval`` below
    the last position n_end = P + T − 1, plus n_end; of these it keeps those > P − interval and
    moves the first kept one to P. Position n stands for the state after reading token n. (Only
    an empty completion can leave nothing to keep, where the reference raises an IndexError;
    here it gets the single node P.)"""
    end = prompt_len + length - 1
    if end < interval:
        grid = [0, end]
    else:
        grid = [0] + [i * interval for i in range(1, end // interval + 1) if i * interval < end]
        if grid[-1] != end:
            grid.append(end)
    kept = [n for n in grid if n > prompt_len - interval] or [prompt_len]  # (empty: the reference fails)
    kept[0] = prompt_len
    return kept


# --- 4. distances --------------------------------------------------------------------------


def prefix_sums(
    x: torch.Tensor, rows: Sequence[int], ys: torch.Tensor, cols: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two sums behind MinDistance for many prefix pairs at once (SPEC §4.3 step 4).

    ``x`` [Lx, H]; ``rows`` prefix lengths of x (each in 1..Lx); ``ys`` [B, Ly, H] (rollouts,
    zero-padded at the end); ``cols`` [B, K] prefix lengths of each y (each in 1..Ly).
    Returns ``(over_x, over_y)``, both [len(rows), B, K]:

        over_x[a, b, k] = Σ_{p < rows[a]}    min_{q < cols[b, k]} ‖x_p − y_{b,q}‖
        over_y[a, b, k] = Σ_{q < cols[b, k]} min_{p < rows[a]}    ‖x_p − y_{b,q}‖

    One pairwise-distance matrix for all of ``ys``; a running min along y (cummin) then a
    running sum along x (cumsum) gives over_x, a running min along x then a running sum along y
    gives over_y. Vectors of a prefix that x and y share bit for bit are at distance exactly 0
    (the matmul form of cdist leaves rounding noise there). NaN distances stay NaN.
    """
    lx, width = x.shape
    b, ly, _ = ys.shape
    k = cols.shape[1]
    dist = torch.cdist(x, ys.reshape(b * ly, width)).view(lx, b, ly)
    shared = _shared_prefix(x, ys)
    diagonal = torch.diagonal(dist, dim1=0, dim2=2)  # [B, min(Lx, Ly)], a view
    diagonal.masked_fill_(torch.arange(diagonal.shape[1], device=x.device)[None, :] < shared[:, None], 0.0)
    col_index = (cols - 1).unsqueeze(0)
    row_index = torch.as_tensor(list(rows), dtype=torch.long, device=x.device) - 1
    near_y = dist.cummin(dim=2).values.gather(2, col_index.expand(lx, b, k))
    over_x = near_y.cumsum(dim=0).index_select(0, row_index)
    near_x = _running_min_at(dist, rows)
    over_y = near_x.cumsum(dim=2).gather(2, col_index.expand(len(rows), b, k))
    return over_x, over_y


def _shared_prefix(x: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Number of leading vectors that x and each y have bit-for-bit equal [B] (e.g. the
    identical prompt of every rollout of a group)."""
    n = min(x.shape[0], ys.shape[1])
    equal = (x[None, :n] == ys[:, :n]).all(dim=2)
    return equal.to(torch.long).cumprod(dim=1).sum(dim=1)


def _running_min_at(dist: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
    """min over dist[:r] along dim 0 for each r in ``rows`` (a cummin along dim 0 read at those
    rows), from block minima between consecutive rows: one contiguous pass over dist."""
    wanted = sorted(set(int(r) for r in rows))
    mins, running, start = {}, None, 0
    for r in wanted:
        if r > start:
            block = dist[start:r].amin(dim=0)
            running = block if running is None else torch.minimum(running, block)
            start = r
        mins[r] = running
    return torch.stack([mins[int(r)] for r in rows])


def min_distance(over_q: torch.Tensor, over_c: torch.Tensor, len_q: torch.Tensor, len_c: torch.Tensor,
                 normalise: bool) -> torch.Tensor:
    """MinDistance of a query prefix (len_q vectors) to a candidate prefix (len_c vectors): the
    sum over the longer one (the query's on a tie), divided by the longer length when
    ``normalise`` (SPEC §4.3 step 4; paper §5.2)."""
    query_longer = len_q >= len_c
    if normalise:
        return torch.where(query_longer, over_q / len_q.clamp_min(1), over_c / len_c.clamp_min(1))
    return torch.where(query_longer, over_q, over_c)


def _chunks(first: int, last: int, per_item: int) -> list[tuple[int, int]]:
    """Split [first, last) into ranges of at most BLOCK_ELEMENTS / per_item items."""
    step = max(1, BLOCK_ELEMENTS // max(1, per_item))
    return [(s, min(s + step, last)) for s in range(first, last, step)]


def _node_columns(lens: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
    """[G, Kmax] node prefix lengths, padded (and empty prefixes raised) to 1."""
    cols = torch.ones(len(lens), max(len(n) for n in lens), dtype=torch.long)
    for j, node_lens in enumerate(lens):
        cols[j, : len(node_lens)] = torch.as_tensor([max(1, n) for n in node_lens], dtype=torch.long)
    return cols.to(device)


def node_distances(reps: torch.Tensor, sizes: Sequence[int], lens: Sequence[Sequence[int]],
                   normalise: bool) -> torch.Tensor:
    """MinDistance between every pair of nodes of the group (SPEC §4.3 step 4): a [N, N] table,
    row = query node, column = candidate node, nodes numbered rollout by rollout.

    ``reps`` [G, Lmax, H] zero-padded compressed vectors, ``sizes[i]`` = L_i, ``lens[i]`` the
    prefix lengths of rollout i's nodes (0 = empty prefix: distance +inf). One distance matrix
    per unordered pair of rollouts serves both directions (i's nodes querying j's and j's
    querying i's); one query rollout at a time against a block of the others keeps memory at
    O(G·L²), bounded by ``BLOCK_ELEMENTS``.
    """
    offsets = [0]
    for node_lens in lens:
        offsets.append(offsets[-1] + len(node_lens))
    table = torch.full((offsets[-1], offsets[-1]), float("inf"), device=reps.device)
    cols = _node_columns(lens, reps.device)
    cols_f = cols.to(torch.float32)
    for i in range(len(lens)):
        if sizes[i] == 0:
            continue
        rows = [max(1, n) for n in lens[i]]
        rows_f = torch.as_tensor(rows, dtype=torch.float32, device=reps.device)[:, None, None]
        for lo, hi in _chunks(i, len(lens), sizes[i] * reps.shape[1]):
            span = max(1, max(sizes[lo:hi]))
            over_i, over_j = prefix_sums(reps[i, : sizes[i]], rows, reps[lo:hi, :span], cols[lo:hi].clamp_max(span))
            len_j = cols_f[None, lo:hi]
            as_query_i = min_distance(over_i, over_j, rows_f, len_j, normalise)
            as_query_j = min_distance(over_j, over_i, len_j, rows_f, normalise)
            for j in range(lo, hi):
                block_i, block_j = slice(offsets[i], offsets[i + 1]), slice(offsets[j], offsets[j + 1])
                table[block_i, block_j] = as_query_i[:, j - lo, : len(lens[j])]
                if j != i:
                    table[block_j, block_i] = as_query_j[:, j - lo, : len(lens[j])].T
    empty = torch.as_tensor([n == 0 for node_lens in lens for n in node_lens], device=reps.device)
    table[empty] = float("inf")
    table[:, empty] = float("inf")
    return table


def query_distances(x: torch.Tensor, rows: Sequence[int], reps: torch.Tensor, sizes: Sequence[int],
                    lens: Sequence[Sequence[int]], normalise: bool) -> torch.Tensor:
    """MinDistance of prefixes of one sequence (``rows`` vectors of ``x`` [L, H]) to every node
    of the group: [len(rows), N] in node order (SPEC §4.3 step 7). An empty query or candidate
    prefix is at +inf."""
    count, width = len(lens), max(len(n) for n in lens)
    cols = _node_columns(lens, x.device)
    dist = torch.full((len(rows), count, width), float("inf"), device=x.device)
    if x.shape[0] > 0:
        safe_rows = [min(max(1, r), x.shape[0]) for r in rows]
        rows_f = torch.as_tensor(safe_rows, dtype=torch.float32, device=x.device)[:, None, None]
        for lo, hi in _chunks(0, count, x.shape[0] * reps.shape[1]):
            span = max(1, max(sizes[lo:hi]))
            over_q, over_c = prefix_sums(x, safe_rows, reps[lo:hi, :span], cols[lo:hi].clamp_max(span))
            dist[:, lo:hi] = min_distance(over_q, over_c, rows_f, cols[None, lo:hi].to(torch.float32), normalise)
    dist[torch.as_tensor([r == 0 for r in rows], device=x.device)] = float("inf")
    in_node = torch.as_tensor([k < len(n) for n in lens for k in range(width)], device=x.device)
    flat = dist.reshape(len(rows), count * width)[:, in_node]
    flat[:, torch.as_tensor([n == 0 for node_lens in lens for n in node_lens], device=x.device)] = float("inf")
    return flat


def reference_distances(reps: Sequence[torch.Tensor], lens: Sequence[Sequence[int]], i: int,
                        query_lens: Sequence[int]) -> torch.Tensor:
    """MinDistance rows of the reference implementation (profile="reference"): queries are
    prefixes of rollout i with ``query_lens`` vectors, candidates every node of every rollout
    ([Q, N] in node order); rollout i's own nodes longer than the query are +inf. One cdist per
    rollout pair with the reference's block shapes (query rows up to the longest query, candidate
    rows up to its longest node), so that the float rounding — which decides between the
    equally distant nodes of identical prompts — is the reference's."""
    device = reps[i].device
    q = torch.as_tensor(list(query_lens), dtype=torch.long, device=device)
    q_len = q.to(torch.float32)[:, None]
    row = (q - 1).clamp_min(0)[:, None]
    online = reps[i][: int(q.max())].float()
    out = []
    for j, node_lens in enumerate(lens):
        c = torch.as_tensor(list(node_lens), dtype=torch.long, device=device)
        c_len = c.to(torch.float32)[None, :]
        col = (c - 1).clamp_min(0)[None, :]
        offline = reps[j][: int(c.max())].float()
        if online.numel() == 0 or offline.numel() == 0:
            out.append(torch.full((len(q), len(c)), float("inf"), device=device))
            continue
        sub = torch.cdist(online, offline, p=2)
        over_rows = torch.cumsum(torch.cummin(sub, dim=1).values, dim=0)[row, col]
        over_cols = torch.cumsum(torch.cummin(sub, dim=0).values, dim=1)[row, col]
        dist = torch.where(q_len >= c_len, over_rows / q_len, over_cols / c_len)
        if j == i:
            dist = torch.where(q_len >= c_len, dist, torch.full_like(dist, float("inf")))
        out.append(dist)
    return torch.cat(out, dim=1)


# --- 5. estimates --------------------------------------------------------------------------


def knn_average(dist: torch.Tensor, valid: torch.Tensor, rewards: torch.Tensor, k: torch.Tensor,
                min_distance: float, power: float, fallback: float) -> torch.Tensor:
    """Default-profile estimate per query row (SPEC §4.3 step 5), ``dist``/``valid`` [Q, N],
    ``rewards`` [N], ``k`` [Q]: NaN distances count as +inf, distances are clamped below at
    ``min_distance``, the k nearest valid candidates (k capped at their number) get weights
    d^(−power) (0 at +inf), V = Σ w r / Σ w, or ``fallback`` (the group mean) when every weight
    is 0. Candidates within a relative ``TIE_RTOL`` of the k-th distance share the remaining
    places equally (the mean over tie-breaking orders), so that the estimate does not depend on
    the order of the rollouts or on rounding noise."""
    inf = torch.tensor(float("inf"), device=dist.device)
    d = torch.where(torch.isnan(dist), inf, dist).clamp_min(min_distance)
    d = torch.where(valid, d, inf)
    k = torch.minimum(k, valid.sum(dim=1))
    kth = d.sort(dim=1).values.gather(1, (k - 1).clamp_min(0)[:, None])
    closer = d < kth * (1 - TIE_RTOL)
    tied = (d >= kth * (1 - TIE_RTOL)) & (d <= kth * (1 + TIE_RTOL))
    free = (k[:, None] - closer.sum(dim=1, keepdim=True)).clamp_min(0)
    share = free / tied.sum(dim=1, keepdim=True).clamp_min(1)
    chosen = (closer.to(d.dtype) + tied.to(d.dtype) * share) * valid
    weights = torch.where(torch.isfinite(d), d.pow(-power), torch.zeros_like(d)) * chosen
    total = weights.sum(dim=1)
    # centred on the fallback so that equal rewards give exactly that reward
    spread = (weights * (rewards - fallback)).sum(dim=1) / total.clamp_min(torch.finfo(d.dtype).tiny)
    return torch.where(total > 0, fallback + spread, torch.full_like(spread, fallback))


def reference_average(dist: torch.Tensor, rewards: torch.Tensor, k: Sequence[int], min_distance: float,
                      power: float) -> torch.Tensor:
    """Reference-profile estimate per query row: NaN → +inf, clamp at ``min_distance``, the
    k smallest by ``torch.topk`` on the row (k capped at the number of columns, masked columns
    included), weights 1/d^power, and 0.0 — not the group mean — when Σw < 1e-8."""
    values = []
    for row, k_row in zip(dist, k):
        d = torch.nan_to_num(row, nan=float("inf")).clamp_min(min_distance)
        top, index = torch.topk(d, min(int(k_row), d.numel()), largest=False, sorted=True)
        weights = 1.0 / (top**power)
        total = weights.sum()
        r = torch.nan_to_num(rewards[index], nan=0.0)
        values.append(torch.zeros((), device=dist.device) if total < 1e-8 else (r * weights).sum() / total)
    return torch.stack(values) if values else torch.zeros(0, device=dist.device)


# --- 6. the estimator ----------------------------------------------------------------------


@dataclasses.dataclass
class _Group:
    """A group made ready for Hista: compressed representations and node grids."""

    reps: list[torch.Tensor]  # compressed smoothed vectors per rollout [L_i, H]
    padded: torch.Tensor  # the same, stacked and zero-padded [G, Lmax, H]
    nodes: list[list[int]]  # node positions in completion coordinates (GAE boundaries)
    lens: list[list[int]]  # compressed prefix length of each node
    rewards: torch.Tensor  # [G] float32
    mean: float  # group mean reward, V(0)

    @property
    def sizes(self) -> list[int]:
        return [int(e.shape[0]) for e in self.reps]

    def node_rewards(self) -> torch.Tensor:
        return torch.cat([self.rewards[i].expand(len(n)) for i, n in enumerate(self.nodes)])

    def node_owner(self) -> torch.Tensor:
        return torch.cat([torch.full((len(n),), i) for i, n in enumerate(self.nodes)]).to(self.rewards.device)

    def node_start(self, i: int) -> int:
        return sum(len(n) for n in self.nodes[:i])


def _check_hidden(rollouts: Sequence[Rollout], where: str) -> None:
    """Every rollout must carry hidden states of shape [P + T, H] with one H (SPEC §3, §12);
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

    ``get("hista", profile="default"|"reference", **overrides)``. Outputs live on the device of
    the hidden states (those of the first rollout)."""

    name = "hista"
    config_class = HistaConfig

    def __init__(self, config: Optional[HistaConfig] = None, profile: Optional[str] = None, **overrides):
        if profile is not None:
            overrides["profile"] = profile
        super().__init__(config, **overrides)
        self.config.check()

    @property
    def reference(self) -> bool:
        return self.config.profile == "reference"

    # --- representations and nodes

    def _represent(self, rollout: Rollout, device: torch.device) -> torch.Tensor:
        """Smoothed, compressed vectors of one sequence (SPEC §4.3 steps 1-2) [L, H]."""
        start = 0 if self.config.include_prompt else len(rollout.prompt_ids)
        return smooth(rollout.hidden.to(device)[start:], self.config.alpha, self.config.stride)

    def _prepare(self, group: RolloutGroup) -> _Group:
        _check_hidden(group.rollouts, "group.rollouts")
        cfg = self.config
        device = group.rollouts[0].hidden.device
        if self.reference:
            smoothed = reference_smooth([r.hidden.to(device) for r in group.rollouts], cfg.alpha)
            reps = [e[:: cfg.stride].float() for e in smoothed]
        else:
            reps = [self._represent(r, device) for r in group.rollouts]
        padded = torch.zeros(len(reps), max(int(e.shape[0]) for e in reps), reps[0].shape[1], device=device)
        for i, e in enumerate(reps):
            padded[i, : e.shape[0]] = e
        nodes, lens = [], []
        for r, e in zip(group.rollouts, reps):
            p, t = len(r.prompt_ids), len(r.completion_ids)
            if self.reference:
                absolute = reference_nodes(p, t, cfg.interval)
                nodes.append([n - p for n in absolute])
                # an empty completion can put a node one vector past the representation
                lens.append([min(n // cfg.stride + 1, int(e.shape[0])) for n in absolute])
            else:
                nodes.append(default_nodes(t, cfg.interval))
                lens.append([default_prefix_length(p, c, cfg.stride, cfg.include_prompt) for c in nodes[-1]])
        rewards = group.rewards.to(device)
        if self.reference:
            mean = float(sum(rewards) / len(rewards))
        else:
            mean = float(rewards[0] + (rewards - rewards[0]).mean())  # exactly r when all rewards are r
        return _Group(reps, padded, nodes, lens, rewards, mean)

    # --- default-profile rules

    def _k(self, c: int, length: int) -> int:
        """k(c) = round(max_k − (max_k − min_k)·c/T) (SPEC §4.3 default profile)."""
        cfg = self.config
        return int(round(cfg.max_k - (cfg.max_k - cfg.min_k) * (c / length if length else 0.0)))

    def _candidates(self, prep: _Group, owners: Sequence[Optional[int]], positions: Sequence[int]) -> torch.Tensor:
        """Valid candidate nodes [Q, N] for queries at completion positions ``positions`` of the
        rollouts ``owners`` (None: an external prefix): every non-empty node of the other
        rollouts, and the owner's own nodes with c' <= c when ``include_self`` (SPEC §4.3)."""
        device = prep.rewards.device
        node_len = torch.as_tensor([n for node_lens in prep.lens for n in node_lens], device=device)
        node_pos = torch.as_tensor([c for nodes in prep.nodes for c in nodes], device=device)
        owner = torch.as_tensor([-1 if o is None else o for o in owners], device=device)[:, None]
        position = torch.as_tensor(list(positions), device=device)[:, None]
        other = prep.node_owner()[None, :] != owner
        own_before = (node_pos[None, :] <= position) & self.config.include_self
        return (node_len[None, :] > 0) & (other | own_before)

    # --- advantages

    def _raw_advantages(self, group: RolloutGroup, gae_lambda: float) -> list[torch.Tensor]:
        """GAE over each rollout's nodes (SPEC §4.3 step 6): V_0 = group mean, the node values,
        V_{K+1} = R_i; scaling by the group std happens in the base class."""
        prep = self._prepare(group)
        values = self._reference_node_values(prep) if self.reference else self._node_values(prep)
        out = []
        for i, r in enumerate(group.rollouts):
            length = len(r.completion_ids)
            if self.reference:
                adv = _reference_gae(prep.nodes[i], prep.mean, values[i].cpu(), float(prep.rewards[i]), length,
                                     gae_lambda)
            elif length == 0:
                adv = torch.zeros(0)
            else:
                chain = torch.cat([torch.tensor([prep.mean]), values[i].cpu(), prep.rewards[i : i + 1].cpu()])
                adv = segment_gae(prep.nodes[i], chain, length, gae_lambda)
            out.append(adv.to(prep.rewards.device))
        return out

    def _node_values(self, prep: _Group) -> list[torch.Tensor]:
        """V at the interior nodes (0 < c < T) of every rollout (SPEC §4.3 step 5)."""
        table = node_distances(prep.padded, prep.sizes, prep.lens, self.config.normalise)
        queries, owners, positions, ks = [], [], [], []
        for i, nodes in enumerate(prep.nodes):
            for j, c in enumerate(nodes):
                if 0 < c < nodes[-1]:
                    queries.append(prep.node_start(i) + j)
                    owners.append(i)
                    positions.append(c)
                    ks.append(self._k(c, nodes[-1]))
        values = knn_average(table[queries], self._candidates(prep, owners, positions), prep.node_rewards(),
                             torch.as_tensor(ks, dtype=torch.long, device=table.device),
                             self.config.min_distance, self.config.power, prep.mean)
        owners_t = torch.as_tensor(owners, dtype=torch.long, device=table.device)
        return [values[owners_t == i] for i in range(len(prep.nodes))]

    def _reference_node_values(self, prep: _Group) -> list[torch.Tensor]:
        """The reference trainer's node values: interior nodes only (the first and last node are
        the group mean and the reward), k_q = max_k − ⌊(max_k − min_k)/N⌋·q over its N interior
        nodes."""
        out = []
        for i, node_lens in enumerate(prep.lens):
            interior = node_lens[1:-1]
            if not interior:
                out.append(torch.zeros(0, device=prep.rewards.device))
                continue
            rows = reference_distances(prep.reps, prep.lens, i, interior)
            out.append(reference_average(rows, prep.node_rewards(), self._reference_ks(len(interior)),
                                         self.config.min_distance, self.config.power))
        return out

    def _reference_ks(self, count: int) -> list[int]:
        cfg = self.config
        step = (cfg.max_k - cfg.min_k) // count if count else 0
        return [cfg.max_k - step * q for q in range(count)]

    # --- state values

    def state_values(self, group: RolloutGroup, states: Sequence[State]) -> torch.Tensor:
        """V at each state (SPEC §4.3 step 7).

        Default profile: the estimate at that exact prefix with the node rules — V(0) = group
        mean, V(T) = R_i, k(t) and candidates as for a node at t; an external ``State.prefix`` is
        evaluated as a whole against every node of the group, with k from its length relative
        to ``State.rollout``'s length (the group's mean length when that is None).
        Reference profile: the reference SVEB rule, the value at the last node before the state.
        """
        if len(group.rollouts) == 0:
            raise ValueError("Hista state values need a non-empty group")
        prep = self._prepare(group)
        if self.reference:
            return self._reference_state_values(group, prep, states)
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
            if s.rollout is None or not 0 <= s.rollout < len(group.rollouts):
                raise ValueError(f"states[{s_index}] names rollout {s.rollout}; the group has {len(group.rollouts)}")
            length = len(group.rollouts[s.rollout].completion_ids)
            if not 0 <= s.t <= length:
                raise ValueError(f"states[{s_index}]: t={s.t} outside 0..{length} (rollout {s.rollout})")
            if s.t == length:
                out[s_index] = prep.rewards[s.rollout]
            elif s.t == 0:
                out[s_index] = prep.mean
            else:
                queries.setdefault((s.rollout, None), []).append((s_index, s.t))
        mean_length = sum(len(r.completion_ids) for r in group.rollouts) / len(group.rollouts)
        for (i, prefix_id), items in queries.items():
            positions = [c for _, c in items]
            if prefix_id is None:
                owner, x, sequence = i, prep.reps[i], group.rollouts[i]
                length = len(sequence.completion_ids)
            else:
                owner, sequence = None, prefixes[prefix_id].prefix
                x = self._represent(sequence, prep.rewards.device)
                length = len(group.rollouts[i].completion_ids) if i is not None else mean_length
            rows = [default_prefix_length(len(sequence.prompt_ids), c, self.config.stride, self.config.include_prompt)
                    for c in positions]
            dist = query_distances(x, rows, prep.padded, prep.sizes, prep.lens, self.config.normalise)
            ks = [self._k(min(c, length), length) for c in positions]
            values = knn_average(dist, self._candidates(prep, [owner] * len(positions), positions),
                                 prep.node_rewards(), torch.as_tensor(ks, dtype=torch.long, device=dist.device),
                                 self.config.min_distance, self.config.power, prep.mean)
            for (s_index, _), v in zip(items, values):
                out[s_index] = v
        return out

    def _reference_state_values(self, group: RolloutGroup, prep: _Group, states: Sequence[State]) -> torch.Tensor:
        """The reference SVEB rule: estimate every node of the state's rollout (k schedule over
        all its N nodes), then take node q − 1 for the first node q at or after the state's last
        token P + t − 1 (q = 0 wraps round to the last node, as Python indexing does there)."""
        out = []
        for s_index, s in enumerate(states):
            if s.prefix is not None or s.rollout is None or not 0 <= s.rollout < len(group.rollouts):
                raise ValueError(f'states[{s_index}]: profile="reference" evaluates states inside group rollouts '
                                 f"only (as the reference SVEB does); pass State(rollout=i, t=t)")
            i, nodes = s.rollout, prep.nodes[s.rollout]
            length = len(group.rollouts[i].completion_ids)
            if not 0 <= s.t <= length:
                raise ValueError(f"states[{s_index}]: t={s.t} outside 0..{length} (rollout {i})")
            # nodes are n − P; the state's last token is at completion position t − 1
            q = next((q for q, n in enumerate(nodes) if n >= s.t - 1), None)
            if q is None:
                raise ValueError(f"states[{s_index}]: t={s.t} lies after the last node of rollout {i}")
            pick = (q - 1) % len(nodes)
            rows = reference_distances(prep.reps, prep.lens, i, prep.lens[i])
            out.append(reference_average(rows[pick : pick + 1], prep.node_rewards(),
                                         [self._reference_ks(len(nodes))[pick]],
                                         self.config.min_distance, self.config.power)[0])
        return torch.stack(out) if out else torch.zeros(0, device=prep.rewards.device)


def _reference_gae(nodes: Sequence[int], mean: float, values: torch.Tensor, reward: float, length: int,
                   gae_lambda: float) -> torch.Tensor:
    """The reference trainer's GAE: segments between consecutive nodes, the last node being the
    last token (T − 1), so the last token — and a rollout with fewer than two nodes — gets 0.
    Its arithmetic types are kept, since a group of one scales advantages by 1/(0 + 1e-4): the
    TD errors and the recursion in float64, except the first TD error, a float32 tensor there
    (node value − the float32 group mean), which makes the first segment's step float32."""
    chain = [torch.tensor(mean, dtype=torch.float32), *values.tolist(), reward]
    deltas = [chain[j] - chain[j - 1] for j in range(1, len(nodes))]
    running = 0.0
    for j in range(len(deltas) - 1, -1, -1):
        running = deltas[j] + gae_lambda * running
        deltas[j] = float(running)
    out = torch.zeros(length)
    for j in range(1, len(nodes)):
        out[max(0, nodes[j - 1]) : max(0, nodes[j])] = deltas[j - 1]
    return out
