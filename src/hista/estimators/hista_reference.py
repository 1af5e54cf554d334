"""Hista's reference profile, ``get("hista", profile="reference")`` (SPEC §4.3, last
paragraph): the public reference implementation (github.com/VOXXXX1874/Hista,
``src/rl/utils/hista_utils.py``, ``HistaTrainer`` and the Hista SVEB script) number for number,
quirks included. Its differences from the default profile are listed in ``docs/estimators.md``.

The steps are those of :mod:`hista.estimators.hista`, computed as the reference computes them;
coordinates (tokens c, positions n = P + c, vectors ℓ) as defined there.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch

from ..types import Rollout, RolloutGroup, State
from . import register
from .hista import Hista, HistaConfig, HistaPaperConfig, PreparedGroup


@dataclasses.dataclass
class HistaReferenceConfig(HistaPaperConfig):
    """The reference implementation's settings (SPEC §4.3 reference profile): those of every
    published recipe and SVEB script (the paper's structure), ``profile="reference"``."""

    profile: str = "reference"


def reference_smooth(hiddens: Sequence[torch.Tensor], alpha: float) -> list[torch.Tensor]:
    """The reference implementation's EMA (SPEC §4.3 reference quirks): m_0 = x_0 (not
    (1 − α)·x_0), m_k = α·m_{k-1} + (1 − α)·x_k, still divided by (1 − α^{k+1}), so
    e_0 = x_0 / (1 − α). Same tensor operations in the same order and dtype as the reference (the
    rollouts stacked into one zero-padded batch), so that the float rounding agrees too."""
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


def reference_nodes(prompt_len: int, length: int, interval: int) -> list[int]:
    """Node positions n of the reference implementation (SPEC §4.3 reference quirks), prompt
    included. Its grid is anchored at the first prompt token: multiples of ``interval`` below
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


def reference_distances(vectors: Sequence[torch.Tensor], node_vectors: Sequence[Sequence[int]], i: int,
                        query_vectors: Sequence[int]) -> torch.Tensor:
    """MinDistance rows of the reference implementation (SPEC §4.3 step 4): queries are
    prefixes of rollout i with ``query_vectors`` vectors, candidates every node of every rollout
    ([Q, N] in node order); rollout i's own nodes longer than the query are +inf. One cdist per
    rollout pair with the reference's block shapes (query rows up to the longest query, candidate
    rows up to its longest node), so that the float rounding — which decides between the
    equally distant nodes of identical prompts — is the reference's."""
    device = vectors[i].device
    q = torch.as_tensor(list(query_vectors), dtype=torch.long, device=device)
    q_len = q.to(torch.float32)[:, None]
    row = (q - 1).clamp_min(0)[:, None]
    online = vectors[i][: int(q.max())].float()
    out = []
    for j, counts in enumerate(node_vectors):
        c = torch.as_tensor(list(counts), dtype=torch.long, device=device)
        c_len = c.to(torch.float32)[None, :]
        col = (c - 1).clamp_min(0)[None, :]
        offline = vectors[j][: int(c.max())].float()
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


def reference_average(dist: torch.Tensor, rewards: torch.Tensor, k: Sequence[int], min_distance: float,
                      power: float) -> torch.Tensor:
    """The reference's estimate per query row (SPEC §4.3 step 5): NaN → +inf, clamp at
    ``min_distance``, the k smallest by ``torch.topk`` on the row (k capped at the number of
    columns, masked columns included), weights 1/d^power, and 0.0 — not the group mean — when
    Σw < 1e-8."""
    values = []
    for row, k_row in zip(dist, k):
        d = torch.nan_to_num(row, nan=float("inf")).clamp_min(min_distance)
        top, index = torch.topk(d, min(int(k_row), d.numel()), largest=False, sorted=True)
        weights = 1.0 / (top**power)
        total = weights.sum()
        r = torch.nan_to_num(rewards[index], nan=0.0)
        values.append(torch.zeros((), device=dist.device) if total < 1e-8 else (r * weights).sum() / total)
    return torch.stack(values) if values else torch.zeros(0, device=dist.device)


def _reference_gae(node_tokens: Sequence[int], mean: float, values: torch.Tensor, reward: float, length: int,
                   gae_lambda: float) -> torch.Tensor:
    """The reference trainer's GAE (SPEC §4.3 step 6, reference quirks): segments between
    consecutive nodes, the last node being the last token (T − 1), so the last token — and a
    rollout with fewer than two nodes — gets 0. Its arithmetic types are kept, since a group of
    one scales advantages by 1/(0 + 1e-4): the TD errors and the recursion in float64, except the
    first TD error, a float32 tensor there (node value − the float32 group mean), which makes
    the first segment's step float32."""
    chain = [torch.tensor(mean, dtype=torch.float32), *values.tolist(), reward]
    deltas = [chain[j] - chain[j - 1] for j in range(1, len(node_tokens))]
    running = 0.0
    for j in range(len(deltas) - 1, -1, -1):
        running = deltas[j] + gae_lambda * running
        deltas[j] = float(running)
    out = torch.zeros(length)
    for j in range(1, len(node_tokens)):
        out[max(0, node_tokens[j - 1]) : max(0, node_tokens[j])] = deltas[j - 1]
    return out


@register("hista", profile="reference")
class HistaReference(Hista):
    """Hista as the reference implementation computes it (SPEC §4.3, reference profile): its
    EMA, its node grid in positions, its k schedule, ``topk`` without tie sharing, 0 advantage
    on the last token, and the SVEB state value at the last node before the state."""

    config_class = HistaReferenceConfig
    reproduces = "github.com/VOXXXX1874/Hista@56d9e7f (trainer and SVEB script)"

    def __init__(self, config: Optional[HistaConfig] = None, **overrides):
        super().__init__(config, **overrides)
        for name in ("layer", "interval", "stride"):
            if getattr(self.config, name) is None:
                raise ValueError(f'profile="reference" has no structure rule: give {name} a value (the reference '
                                 f"implementation's is {getattr(HistaReferenceConfig, name)})")
        for name in ("include_self", "include_prompt", "normalise"):
            if not getattr(self.config, name):
                raise ValueError(f'profile="reference" has no {name}=False (the reference implementation '
                                 f'always uses {name}=True); use profile="default"')

    def represent(self, rollout: Rollout) -> None:
        """None: the reference's smoothing (``reference_smooth``) is not split per rollout here,
        so a trainer sends its hidden states."""
        return None

    def _compress(self, rollouts: Sequence[Rollout], device: torch.device, stride: int) -> list[torch.Tensor]:
        smoothed = reference_smooth([r.hidden.to(device) for r in rollouts], self.config.alpha)
        return [e[::stride].float() for e in smoothed]

    def _nodes(self, rollout: Rollout, vector_total: int, interval: int, stride: int) -> tuple[list[int], list[int]]:
        p = len(rollout.prompt_ids)
        node_positions = reference_nodes(p, len(rollout.completion_ids), interval)
        # an empty completion can put a node one vector past the representation
        counts = [min(n // stride + 1, vector_total) for n in node_positions]
        return [n - p for n in node_positions], counts

    def _group_mean(self, rewards: torch.Tensor) -> float:
        return float(sum(rewards) / len(rewards))

    def _ks(self, count: int) -> list[int]:
        """The reference's k schedule over ``count`` nodes: k_q = max_k − ⌊(max_k − min_k)/N⌋·q."""
        cfg = self.config
        step = (cfg.max_k - cfg.min_k) // count if count else 0
        return [cfg.max_k - step * q for q in range(count)]

    def _node_values(self, prep: PreparedGroup) -> list[torch.Tensor]:
        """The reference trainer's node values: interior nodes only (the first and last node are
        the group mean and the reward), k scheduled over the N interior nodes."""
        out = []
        for i, counts in enumerate(prep.node_vectors):
            interior = counts[1:-1]
            if not interior:
                out.append(torch.zeros(0, device=prep.rewards.device))
                continue
            rows = reference_distances(prep.vectors, prep.node_vectors, i, interior)
            out.append(reference_average(rows, prep.node_rewards(), self._ks(len(interior)),
                                         self.config.min_distance, self.config.power))
        return out

    def _advantages(self, prep: PreparedGroup, i: int, values: torch.Tensor, length: int,
                    gae_lambda: float) -> torch.Tensor:
        return _reference_gae(prep.node_tokens[i], prep.mean, values.cpu(), float(prep.rewards[i]), length, gae_lambda)

    def _state_values(self, group: RolloutGroup, prep: PreparedGroup, states: Sequence[State]) -> torch.Tensor:
        """The reference SVEB rule: estimate every node of the state's rollout (k schedule over
        all its N nodes), then take node q − 1 for the first node q at or after the state's last
        token P + t − 1 (q = 0 wraps round to the last node, as Python indexing does there)."""
        out = []
        for s_index, s in enumerate(states):
            if s.prefix is not None or s.rollout is None or not 0 <= s.rollout < len(group.rollouts):
                raise ValueError(f'states[{s_index}]: profile="reference" evaluates states inside group rollouts '
                                 f"only (as the reference SVEB does); pass State(rollout=i, t=t)")
            i, node_tokens = s.rollout, prep.node_tokens[s.rollout]
            length = len(group.rollouts[i].completion_ids)
            if not 0 <= s.t <= length:
                raise ValueError(f"states[{s_index}]: t={s.t} outside 0..{length} (rollout {i})")
            # nodes are n − P; the state's last token is at completion position t − 1
            q = next((q for q, c in enumerate(node_tokens) if c >= s.t - 1), None)
            if q is None:
                raise ValueError(f"states[{s_index}]: t={s.t} lies after the last node of rollout {i}")
            pick = (q - 1) % len(node_tokens)
            rows = reference_distances(prep.vectors, prep.node_vectors, i, prep.node_vectors[i])
            out.append(reference_average(rows[pick : pick + 1], prep.node_rewards(), [self._ks(len(node_tokens))[pick]],
                                         self.config.min_distance, self.config.power)[0])
        return torch.stack(out) if out else torch.zeros(0, device=prep.rewards.device)
