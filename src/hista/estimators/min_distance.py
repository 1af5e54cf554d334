"""MinDistance between every pair of prefixes of two vector sequences, in bulk (SPEC §4.3 step 4;
paper §5.2). Pure tensor math, used by :mod:`hista.estimators.hista`.

Sequences here are the compressed vectors of a rollout; lengths and prefixes are counted in
*vectors* (a prefix of ℓ vectors is ``E[:ℓ]``), never in tokens:

- ``query_vectors[a]``: vector count of the a-th query prefix (of one sequence);
- ``node_vectors[i][j]``: vector count of node j of rollout i (0 = an empty prefix, at +inf);
- ``vector_counts[i]``: L_i, the number of vectors of rollout i (rows of ``stacked[i]`` in use).

``stacked`` is the group's vectors stacked into one zero-padded tensor [G, Lmax, H]; nodes are
numbered rollout by rollout (node j of rollout i is column Σ_{i' < i} len(node_vectors[i']) + j).
"""

from __future__ import annotations

from typing import Sequence

import torch

#: largest pairwise-distance block (elements) held at once; bounds memory, not results
BLOCK_ELEMENTS = 1 << 24


def prefix_sums(
    query: torch.Tensor, query_vectors: Sequence[int], candidates: torch.Tensor, candidate_vectors: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two sums behind MinDistance for many prefix pairs at once (SPEC §4.3 step 4).

    ``query`` x [Lx, H]; ``query_vectors`` prefix lengths ℓ_a of x (each in 1..Lx);
    ``candidates`` y [B, Ly, H] (sequences, zero-padded at the end); ``candidate_vectors``
    [B, K] prefix lengths ℓ_bk of each y (each in 1..Ly). Returns
    ``(over_query, over_candidate)``, both [len(query_vectors), B, K]:

        over_query[a, b, k]     = Σ_{p < ℓ_a}  min_{q < ℓ_bk} ‖x_p − y_{b,q}‖
        over_candidate[a, b, k] = Σ_{q < ℓ_bk} min_{p < ℓ_a}  ‖x_p − y_{b,q}‖

    One pairwise-distance matrix for all of y; a running min along y (cummin) then a running
    sum along x (cumsum) gives over_query, a running min along x then a running sum along y
    gives over_candidate. Vectors of a prefix that x and y share bit for bit are at distance
    exactly 0 (the matmul form of cdist leaves rounding noise there). NaN distances stay NaN.
    """
    lx, width = query.shape
    b, ly, _ = candidates.shape
    k = candidate_vectors.shape[1]
    dist = torch.cdist(query, candidates.reshape(b * ly, width)).view(lx, b, ly)
    shared = _shared_prefix(query, candidates)
    diagonal = torch.diagonal(dist, dim1=0, dim2=2)  # [B, min(Lx, Ly)], a view
    diagonal.masked_fill_(torch.arange(diagonal.shape[1], device=query.device)[None, :] < shared[:, None], 0.0)
    candidate_last = (candidate_vectors - 1).unsqueeze(0)
    query_last = torch.as_tensor(list(query_vectors), dtype=torch.long, device=query.device) - 1
    near_candidate = dist.cummin(dim=2).values.gather(2, candidate_last.expand(lx, b, k))
    over_query = near_candidate.cumsum(dim=0).index_select(0, query_last)
    near_query = _running_min_at(dist, query_vectors)
    over_candidate = near_query.cumsum(dim=2).gather(2, candidate_last.expand(len(query_vectors), b, k))
    return over_query, over_candidate


def _shared_prefix(query: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """Number of leading vectors that the query and each candidate have bit-for-bit equal [B]
    (e.g. the identical prompt of every rollout of a group)."""
    n = min(query.shape[0], candidates.shape[1])
    equal = (query[None, :n] == candidates[:, :n]).all(dim=2)
    return equal.to(torch.long).cumprod(dim=1).sum(dim=1)


def _running_min_at(dist: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
    """min over dist[:ℓ] along dim 0 for each ℓ in ``counts`` (a cummin along dim 0 read at
    those rows), from block minima between consecutive counts: one contiguous pass over dist."""
    wanted = sorted(set(int(n) for n in counts))
    mins, running, start = {}, None, 0
    for n in wanted:
        if n > start:
            block = dist[start:n].amin(dim=0)
            running = block if running is None else torch.minimum(running, block)
            start = n
        mins[n] = running
    return torch.stack([mins[int(n)] for n in counts])


def min_distance(over_query: torch.Tensor, over_candidate: torch.Tensor, query_len: torch.Tensor,
                 candidate_len: torch.Tensor, normalise: bool) -> torch.Tensor:
    """MinDistance of a query prefix (``query_len`` vectors) to a candidate prefix
    (``candidate_len`` vectors) from :func:`prefix_sums`: the sum over the longer one (the
    query's on a tie), divided by the longer length when ``normalise`` (SPEC §4.3 step 4)."""
    query_longer = query_len >= candidate_len
    if normalise:
        return torch.where(query_longer, over_query / query_len.clamp_min(1),
                           over_candidate / candidate_len.clamp_min(1))
    return torch.where(query_longer, over_query, over_candidate)


def _chunks(first: int, last: int, per_item: int) -> list[tuple[int, int]]:
    """Split [first, last) into ranges of at most BLOCK_ELEMENTS / per_item items."""
    step = max(1, BLOCK_ELEMENTS // max(1, per_item))
    return [(s, min(s + step, last)) for s in range(first, last, step)]


def _node_columns(node_vectors: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
    """[G, Kmax] node vector counts, padded (and empty prefixes raised) to 1."""
    columns = torch.ones(len(node_vectors), max(len(n) for n in node_vectors), dtype=torch.long)
    for i, counts in enumerate(node_vectors):
        columns[i, : len(counts)] = torch.as_tensor([max(1, n) for n in counts], dtype=torch.long)
    return columns.to(device)


def node_distances(stacked: torch.Tensor, vector_counts: Sequence[int], node_vectors: Sequence[Sequence[int]],
                   normalise: bool) -> torch.Tensor:
    """MinDistance between every pair of nodes of the group (SPEC §4.3 step 4): a [N, N] table,
    row = query node, column = candidate node, nodes numbered rollout by rollout.

    One distance matrix per unordered pair of rollouts serves both directions (i's nodes
    querying j's and j's querying i's); one query rollout at a time against a block of the
    others keeps memory at O(G·L²), bounded by ``BLOCK_ELEMENTS``. Empty prefixes are at +inf.
    """
    offsets = [0]
    for counts in node_vectors:
        offsets.append(offsets[-1] + len(counts))
    table = torch.full((offsets[-1], offsets[-1]), float("inf"), device=stacked.device)
    columns = _node_columns(node_vectors, stacked.device)
    columns_f = columns.to(torch.float32)
    for i in range(len(node_vectors)):
        if vector_counts[i] == 0:
            continue
        rows = [max(1, n) for n in node_vectors[i]]
        rows_f = torch.as_tensor(rows, dtype=torch.float32, device=stacked.device)[:, None, None]
        for lo, hi in _chunks(i, len(node_vectors), vector_counts[i] * stacked.shape[1]):
            span = max(1, max(vector_counts[lo:hi]))
            over_i, over_j = prefix_sums(stacked[i, : vector_counts[i]], rows, stacked[lo:hi, :span],
                                         columns[lo:hi].clamp_max(span))
            len_j = columns_f[None, lo:hi]
            as_query_i = min_distance(over_i, over_j, rows_f, len_j, normalise)
            as_query_j = min_distance(over_j, over_i, len_j, rows_f, normalise)
            for j in range(lo, hi):
                block_i, block_j = slice(offsets[i], offsets[i + 1]), slice(offsets[j], offsets[j + 1])
                table[block_i, block_j] = as_query_i[:, j - lo, : len(node_vectors[j])]
                if j != i:
                    table[block_j, block_i] = as_query_j[:, j - lo, : len(node_vectors[j])].T
    empty = torch.as_tensor([n == 0 for counts in node_vectors for n in counts], device=stacked.device)
    table[empty] = float("inf")
    table[:, empty] = float("inf")
    return table


def query_distances(query: torch.Tensor, query_vectors: Sequence[int], stacked: torch.Tensor,
                    vector_counts: Sequence[int], node_vectors: Sequence[Sequence[int]],
                    normalise: bool) -> torch.Tensor:
    """MinDistance of prefixes of one sequence (``query_vectors`` vectors of ``query`` [L, H])
    to every node of the group: [len(query_vectors), N] in node order (SPEC §4.3 step 7). An
    empty query or candidate prefix is at +inf."""
    count, width = len(node_vectors), max(len(n) for n in node_vectors)
    columns = _node_columns(node_vectors, query.device)
    dist = torch.full((len(query_vectors), count, width), float("inf"), device=query.device)
    if query.shape[0] > 0:
        rows = [min(max(1, n), query.shape[0]) for n in query_vectors]
        rows_f = torch.as_tensor(rows, dtype=torch.float32, device=query.device)[:, None, None]
        for lo, hi in _chunks(0, count, query.shape[0] * stacked.shape[1]):
            span = max(1, max(vector_counts[lo:hi]))
            over_q, over_c = prefix_sums(query, rows, stacked[lo:hi, :span], columns[lo:hi].clamp_max(span))
            dist[:, lo:hi] = min_distance(over_q, over_c, rows_f, columns[None, lo:hi].to(torch.float32), normalise)
    dist[torch.as_tensor([n == 0 for n in query_vectors], device=query.device)] = float("inf")
    in_node = torch.as_tensor([k < len(n) for n in node_vectors for k in range(width)], device=query.device)
    flat = dist.reshape(len(query_vectors), count * width)[:, in_node]
    flat[:, torch.as_tensor([n == 0 for counts in node_vectors for n in counts], device=query.device)] = float("inf")
    return flat
