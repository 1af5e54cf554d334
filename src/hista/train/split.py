"""Groups that span processes: each group is estimated once, by the process that holds
its first row (the group's owner). The other processes holding rows of the group send the owner
only what the group needs and get those rows' advantages back, point to point; processes that
share no group exchange nothing.

TRL lays a generation batch of B rows out so that process p holds rows [p·b, (p+1)·b) and a
group is G consecutive rows. A row sent to its owner carries its prompt and completion ids (the
owner checks that the prompt is the group's and decodes text when the estimator needs it), its
problem id and, for an estimator that reads hidden states, what it reads of them, ragged:
the estimator's per-sequence representation when it has one
(:meth:`hista.estimators.base.Estimator.represent`; Hista's smoothed, strided vectors, float32),
computed where the row lies, else the hidden states in the dtype they were captured in. Either
way only the part after the prompt travels: a group's rollouts share one prompt, whose part the
owner computes from its own row. What comes back is the row's per-token advantages (float32).

Every process derives the same plan from the layout alone (who sends to whom), and the
transfers run in one global order of (sender, receiver) pairs, each process doing its part, so
blocking sends and receives cannot deadlock.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist


@dataclasses.dataclass
class Row:
    """One rollout as a process holds it: global row index, unpadded ids, problem id, hidden
    states [P + T, H] and, once computed, the estimator's representation of them."""

    index: int
    prompt_ids: list[int]
    completion_ids: list[int]
    problem_id: Optional[str] = None
    hidden: Optional[torch.Tensor] = None
    representation: Optional[torch.Tensor] = None


def owner(row: int, group_size: int, rows_per_process: int) -> int:
    """The process that estimates the group of global row ``row``: the one holding its first row."""
    return (row // group_size * group_size) // rows_per_process


def plan(world: int, rows_per_process: int, group_size: int) -> list[tuple[int, int]]:
    """The (sender, receiver) pairs of the rows' trip to their owners, in the global order every
    process follows (the advantages travel the reversed pairs back)."""
    pairs = set()
    for row in range(world * rows_per_process):
        sender, receiver = row // rows_per_process, owner(row, group_size, rows_per_process)
        if sender != receiver:
            pairs.add((sender, receiver))
    return sorted(pairs)


def _send(peer: int, meta: list, tensor: Optional[torch.Tensor]) -> None:
    dist.send_object_list([meta, None if tensor is None else (tuple(tensor.shape), str(tensor.dtype))], dst=peer)
    if tensor is not None:
        dist.send(tensor.contiguous(), dst=peer)


def _recv(peer: int, device: torch.device) -> tuple[list, Optional[torch.Tensor]]:
    box: list[Any] = [None, None]
    dist.recv_object_list(box, src=peer)
    meta, spec = box
    if spec is None:
        return meta, None
    shape, dtype = spec
    tensor = torch.empty(shape, dtype=getattr(torch, dtype.removeprefix("torch.")), device=device)
    dist.recv(tensor, src=peer)
    return meta, tensor


def _run(pairs: Sequence[tuple[int, int]], rank: int, outgoing: Callable[[int], tuple[list, Optional[torch.Tensor]]],
         device: torch.device) -> dict[int, tuple[list, Optional[torch.Tensor]]]:
    """Carry out ``pairs`` in order: this process sends ``outgoing(receiver)`` where it is the
    sender and receives where it is the receiver. Returns what it received, by sender."""
    received = {}
    for sender, receiver in pairs:
        if sender == rank:
            _send(receiver, *outgoing(receiver))
        elif receiver == rank:
            received[sender] = _recv(sender, device)
    return received


def estimate_split(rows: Sequence[Row], rewards: torch.Tensor, group_size: int,
                   estimate: Callable[[list[list[Row]], list[list[float]]], list[list[torch.Tensor]]],
                   represent: Optional[Callable[[Row], Optional[tuple[torch.Tensor, int]]]] = None
                   ) -> list[torch.Tensor]:
    """Per-token advantages of this process's ``rows`` (in order) when groups span processes
    (module docstring). ``rewards``: the whole generation batch's [B], as TRL gathered them;
    ``represent(row)``: the estimator's representation of a row's hidden states and how many of
    its leading vectors cover the prompt alone, or None (send hidden states); ``estimate(groups,
    rewards)`` estimates every whole group this process owns at once (a list of groups, each a
    list of rows, with their rewards; so that an estimator that learns across groups sees them
    together), from rows that carry a ``representation`` (when ``represent`` gave one) or hidden
    states over prompt and completion, and returns each group's advantages. Needs an
    initialised ``torch.distributed`` process group; every process calls it with its own rows."""
    rank, world = dist.get_rank(), dist.get_world_size()
    b = len(rows)
    device = rewards.device
    pairs = plan(world, b, group_size)
    mine = [r for r in rows if owner(r.index, group_size, b) == rank]
    shared = _represent(rows, represent)
    received = _run(pairs, rank, lambda receiver: _rows_for(rows, receiver, group_size, shared), device)
    arrived = _arrived(received, shared)
    by_index = _whole_rows(mine, arrived, group_size, shared)
    advantages = _estimate_owned(mine, by_index, rewards, group_size, estimate)
    returned = _run([(r, s) for s, r in pairs], rank,
                    lambda receiver: _advantages_for(arrived, advantages, receiver, b, device), device)
    _take_back(returned, advantages)
    return [advantages[r.index] for r in rows]


def _represent(rows: Sequence[Row], represent: Optional[Callable[[Row], Optional[tuple[torch.Tensor, int]]]]
               ) -> dict[int, int]:
    """Each row's representation, set in place, so that what travels is smaller than its hidden
    states; returns how many of a row's leading vectors cover its prompt only (empty: none)."""
    shared: dict[int, int] = {}
    if represent is not None and rows and rows[0].hidden is not None:
        for r in rows:
            found = represent(r)
            if found is None:
                break
            r.representation, shared[r.index] = found
    return shared


def _rows_for(rows: Sequence[Row], receiver: int, group_size: int, shared: dict[int, int]
              ) -> tuple[list, Optional[torch.Tensor]]:
    """What this process sends ``receiver`` of the rows whose groups it owns: each row's ids and
    problem id, and its part past the prompt (representation or hidden states) when it has one."""
    b = len(rows)
    going = [r for r in rows if owner(r.index, group_size, b) == receiver]
    meta = [(r.index, r.prompt_ids, r.completion_ids, r.problem_id) for r in going]
    if shared:  # the representation past the prompt's own vectors
        parts = [r.representation[shared[r.index]:] for r in going]
    elif going and going[0].hidden is not None:  # the completion tokens' hidden states
        parts = [r.hidden[len(r.prompt_ids):] for r in going]
    else:
        return [meta, None], None
    return [meta, [int(x.shape[0]) for x in parts]], torch.cat(parts)


def _arrived(received: dict[int, tuple[list, Optional[torch.Tensor]]], shared: dict[int, int]) -> list[Row]:
    """The rows other processes sent this one (as :func:`_rows_for` packed them), by sender."""
    arrived = []
    for (meta, sizes), tensor in received.values():
        offset = 0
        for k, (index, prompt_ids, completion_ids, problem_id) in enumerate(meta):
            row = Row(index, prompt_ids, completion_ids, problem_id)
            if tensor is not None:
                part = tensor[offset: offset + sizes[k]]
                offset += sizes[k]
                if shared:
                    row.representation = part
                else:
                    row.hidden = part
            arrived.append(row)
    return arrived


def _whole_rows(mine: list[Row], arrived: list[Row], group_size: int, shared: dict[int, int]) -> dict[int, Row]:
    """This process's own rows and the arrived ones by index, each arrived row completed with
    its group's prompt part, held here (checked to be the same prompt)."""
    by_index = {r.index: r for r in mine}
    for r in arrived:
        head = by_index[r.index // group_size * group_size]  # this process's own row of that group
        if r.prompt_ids != head.prompt_ids:
            raise ValueError(f"rows {head.index} and {r.index} are in one group but have different prompts: the "
                             "batch is not laid out in groups of consecutive rows")
        if r.representation is not None:  # the group's prompt vectors, computed here, before the row's own
            ahead = head.representation[: shared[head.index]]
            r.representation = torch.cat([ahead, r.representation.to(ahead.device)])
        elif r.hidden is not None:  # the group's prompt states, held here, before the row's own
            r.hidden = torch.cat([head.hidden[: len(head.prompt_ids)], r.hidden.to(head.hidden.device)])
        by_index[r.index] = r
    return by_index


def _estimate_owned(mine: list[Row], by_index: dict[int, Row], rewards: torch.Tensor, group_size: int,
                    estimate: Callable[[list[list[Row]], list[list[float]]], list[list[torch.Tensor]]]
                    ) -> dict[int, torch.Tensor]:
    """The advantages of every row of the groups this process owns, by row index, estimated in
    one call."""
    advantages: dict[int, torch.Tensor] = {}
    owned = [[by_index[i] for i in range(first, first + group_size)]
             for first in sorted({r.index // group_size * group_size for r in mine})]
    if owned:
        estimated = estimate(owned, [[float(rewards[r.index]) for r in group] for group in owned])
        for group, values in zip(owned, estimated):
            advantages.update((r.index, adv) for r, adv in zip(group, values))
    return advantages


def _advantages_for(arrived: list[Row], advantages: dict[int, torch.Tensor], receiver: int, b: int,
                    device: torch.device) -> tuple[list, Optional[torch.Tensor]]:
    """The advantages of the rows ``receiver`` sent here, flat (float32), with each row's index
    and length."""
    back = [r for r in arrived if r.index // b == receiver]
    flat = torch.cat([advantages[r.index].to(device, torch.float32).reshape(-1) for r in back])
    return [(r.index, len(r.completion_ids)) for r in back], flat


def _take_back(returned: dict[int, tuple[list, Optional[torch.Tensor]]], advantages: dict[int, torch.Tensor]) -> None:
    """The advantages of this process's rows that other processes estimated, into ``advantages``."""
    for meta, flat in returned.values():
        offset = 0
        for index, length in meta:
            advantages[index] = flat[offset: offset + length]
            offset += length
