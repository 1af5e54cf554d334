"""Between a trainer's padded batch tensors and the RolloutGroups estimators read (SPEC §3, §9).

TRL lays a generation batch out as rows of prompt + completion: ``prompt_ids`` [B, P] padded on
the left, ``completion_ids`` [B, T] padded on the right, a prompt's G rollouts in consecutive
rows. These two pure functions convert that layout into groups and the estimators' per-token
advantages back into a [B, T] tensor; no trainer or model is involved.
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional, Sequence

import torch

from ..rollout.offsets import decode_with_offsets
from ..types import Rollout, RolloutGroup


def batch_to_groups(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    rewards: torch.Tensor,
    group_size: int,
    *,
    problem_ids: Optional[Sequence[Optional[str]]] = None,
    hidden: Optional[torch.Tensor] = None,
    tokenizer: Any = None,
) -> list[RolloutGroup]:
    """Cut a padded batch into RolloutGroups of ``group_size`` consecutive rows (SPEC §3).

    ``rewards`` [B]; ``hidden`` [B, P + T, H] aligned with the columns of ``prompt_ids`` then
    ``completion_ids`` (padding dropped: a rollout gets [prompt_len + T_i, H]); ``tokenizer``
    decodes completion text and token offsets (for estimators that declare ``needs_text``).
    A group's ``prompt_id`` is its problem id (``problem_ids[row]``), so that value tables kept
    across steps follow the problem, not the batch slot; without one it is a digest of the
    prompt's token ids.
    """
    batch, width = completion_ids.shape
    if group_size < 1 or batch % group_size:
        raise ValueError(f"{batch} rows cannot be cut into groups of {group_size}")
    if rewards.numel() != batch:
        raise ValueError(f"{rewards.numel()} rewards for {batch} completions")
    if problem_ids is not None and len(problem_ids) != batch:
        raise ValueError(f"{len(problem_ids)} problem ids for {batch} completions")
    prompt_width = prompt_ids.size(1)
    if hidden is not None and hidden.shape[:2] != (batch, prompt_width + width):
        raise ValueError(f"hidden states of shape {tuple(hidden.shape)} for a batch of {batch} x "
                         f"({prompt_width} + {width}) tokens")
    prompts, completions, states = unpad(prompt_ids, prompt_mask, completion_ids, completion_mask, hidden)
    groups = []
    for start in range(0, batch, group_size):
        rows = slice(start, start + group_size)
        groups.append(build_group(prompts[rows], completions[rows], rewards[rows].tolist(),
                                  hidden=None if states is None else states[rows], tokenizer=tokenizer,
                                  problem_id=problem_ids[start] if problem_ids is not None else None))
    return groups


def unpad(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
          completion_mask: torch.Tensor, hidden: Optional[torch.Tensor] = None
          ) -> tuple[list[list[int]], list[list[int]], Optional[list[torch.Tensor]]]:
    """Each row of a padded batch without its padding (SPEC §3): prompt ids (left padding
    dropped), completion ids (right padding dropped) and, with ``hidden`` [B, P + T, H], the
    row's hidden states [prompt_len + T_i, H] (None without)."""
    prompt_width = prompt_ids.size(1)
    lengths = completion_mask.sum(dim=1).long().tolist()
    prompts, completions, states = [], [], []
    for i, length in enumerate(lengths):
        keep = prompt_mask[i].bool()
        prompts.append(prompt_ids[i][keep].tolist())
        completions.append(completion_ids[i, :length].tolist())
        if hidden is not None:
            states.append(torch.cat([hidden[i, :prompt_width][keep], hidden[i, prompt_width: prompt_width + length]]))
    return prompts, completions, states if hidden is not None else None


def build_group(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], rewards: Sequence[float], *,
                hidden: Optional[Sequence[torch.Tensor]] = None, problem_id: Optional[str] = None,
                tokenizer: Any = None) -> RolloutGroup:
    """One RolloutGroup from unpadded rows (SPEC §3): prompt and completion ids, rewards, and
    optionally each row's hidden states [prompt + completion, H]; ``tokenizer`` decodes text and
    offsets. Its ``prompt_id`` is ``problem_id``, else a digest of the first prompt's ids."""
    rollouts = []
    for i, (prompt, ids, reward) in enumerate(zip(prompts, completions, rewards)):
        text, offsets = decode_with_offsets(tokenizer, ids) if tokenizer is not None else ("", None)
        rollouts.append(Rollout(prompt_ids=prompt, completion_ids=ids, reward=float(reward), completion_text=text,
                                offsets=offsets, hidden=None if hidden is None else hidden[i]))
    prompt_id = str(problem_id) if problem_id is not None else _digest(rollouts[0].prompt_ids)
    return RolloutGroup(rollouts, prompt_id=prompt_id)


def groups_to_batch(advantages: Sequence[Sequence[torch.Tensor]], shape: Sequence[int],
                    device: Optional[torch.device] = None) -> torch.Tensor:
    """The inverse direction (SPEC §9): per-group lists of per-rollout advantages [T_i] (in the
    order of :func:`batch_to_groups`) written into a zero-padded float32 tensor of ``shape``
    [B, T]."""
    out = torch.zeros(tuple(shape), dtype=torch.float32, device=device)
    row = 0
    for group in advantages:
        for adv in group:
            out[row, : adv.numel()] = adv.to(out.device)
            row += 1
    if row != out.size(0):
        raise ValueError(f"advantages for {row} rollouts but the batch has {out.size(0)} rows")
    return out


def _digest(token_ids: Sequence[int]) -> str:
    """A stable id for a prompt without a problem id: a digest of its token ids."""
    return "prompt-" + hashlib.sha1(",".join(map(str, token_ids)).encode()).hexdigest()[:16]
