"""A micro-batch of GRPO rows without padding, for the loss forward.

TRL's loss forward runs the policy on rows of prompt + completion padded to the longest row, and
a group's G rows repeat the same prompt G times. :func:`pack` lays a micro-batch out as one
packed row per distinct prompt instead: the prompt's tokens once, then each rollout's segment —
a copy of the prompt's last token followed by the completion's tokens but its last — with a
block mask (the prompt causal; a segment attends to the prompt and causally to itself) and
position ids that restart after the prompt in every segment. Position t of a segment predicts
completion token t, so the packed row is scored with pre-shifted labels (``shift_labels``) and
:func:`unpack` puts per-position values back into TRL's [B, T] completion layout. A completion's
padding (``completion_mask`` 0) is neither computed nor returned: those positions read 0, as in
TRL's own pass, whose labels are -100 there. A packed row grows up to the longer of a padded
row and :data:`ROW_LIMIT` positions, then the prompt's next rollouts start another row with the
prompt again: a row's attention (quadratic in its length under a dense mask) then never costs
more than a few thousand positions' worth, however long the completions. Pure tensor functions;
no model is involved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

IGNORE = -100  # the label of a position that is not scored (transformers' convention)
#: the positions a packed row may grow to when a padded row is shorter
ROW_LIMIT = 2048


@dataclass
class Packed:
    """A packed micro-batch: ``input_ids``, ``position_ids`` and ``shift_labels`` [R, L] (R
    distinct prompts), ``attention_mask`` [R, 1, L, L] (True: may attend), and ``where`` [N]:
    for each scored completion token (row-major over the [B, T] completion layout) its flat
    index into the [R, L] packed positions."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    shift_labels: torch.Tensor
    attention_mask: torch.Tensor
    where: torch.Tensor
    scored: torch.Tensor  # [B, T] bool: the completion positions that were scored


def packable(completion_mask: torch.Tensor) -> bool:
    """Whether every row's completion mask is a prefix of ones (what :func:`pack` assumes)."""
    mask = completion_mask.bool()
    lengths = mask.sum(dim=1, keepdim=True)
    prefix = torch.arange(mask.size(1), device=mask.device)[None, :] < lengths
    return bool(torch.equal(mask, prefix))


def pack(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
         completion_mask: torch.Tensor, pad_token_id: int = 0, row_limit: Optional[int] = None) -> Packed:
    """Pack rows of left-padded prompts [B, P] and right-padded completions [B, T] (masks of
    ones and zeros) into rows of one prompt each, at most max(P + T, ``row_limit``) long
    (default :data:`ROW_LIMIT`; see the module's docstring)."""
    limit = max(prompt_ids.size(1) + completion_ids.size(1), ROW_LIMIT if row_limit is None else row_limit)
    lengths = completion_mask.bool().sum(dim=1).tolist()
    prompts, rows_of = _by_prompt(prompt_ids, prompt_mask)
    ids, positions, labels, segments, sources = _lay_out(prompts, rows_of, completion_ids, lengths, limit)
    width = max(x.numel() for x in ids)
    device = completion_ids.device
    allowed = _block_mask(_stack(segments, -1, width, device))
    scored, where = _scored(sources, completion_ids.shape, width, device)
    return Packed(input_ids=_stack(ids, pad_token_id, width, device), position_ids=_stack(positions, 0, width, device),
                  shift_labels=_stack(labels, IGNORE, width, device), attention_mask=allowed[:, None], where=where,
                  scored=scored)


def _by_prompt(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[list[torch.Tensor], list[list[int]]]:
    """The distinct prompts (unpadded), in order of first appearance, and the rows of each."""
    rows_of: dict[tuple, list[int]] = {}
    prompts = []
    for i in range(prompt_ids.size(0)):
        prompt = prompt_ids[i][prompt_mask[i].bool()]
        rows = rows_of.setdefault(tuple(prompt.tolist()), [])
        if not rows:
            prompts.append(prompt)
        rows.append(i)
    return prompts, list(rows_of.values())


def _lay_out(prompts: list[torch.Tensor], rows_of: list[list[int]], completion_ids: torch.Tensor,
             lengths: list[int], limit: int) -> tuple[list, list, list, list, list[tuple[int, int, int, int]]]:
    """The packed rows' ids, positions, labels and segment numbers (0: the prompt), one tensor
    per row, and where each completion went: (row of the batch, packed row, start, length)."""
    ids, positions, labels, segments, sources = [], [], [], [], []
    for prompt, rows in zip(prompts, rows_of):
        n, offset = prompt.numel(), None
        for i in (i for i in rows if lengths[i] > 0):
            t = lengths[i]
            if offset is None or offset + t > limit:  # a new row: the prompt but its last token
                ids.append([prompt[:-1]])
                positions.append([torch.arange(n - 1)])
                labels.append([torch.full((n - 1,), IGNORE)])
                segments.append([torch.zeros(n - 1, dtype=torch.long)])
                offset = n - 1
            completion = completion_ids[i, :t]
            ids[-1].append(torch.cat([prompt[-1:], completion[:-1]]))
            positions[-1].append(torch.arange(n - 1, n - 1 + t))
            labels[-1].append(completion)
            segments[-1].append(torch.full((t,), len(segments[-1])))
            sources.append((i, len(ids) - 1, offset, t))
            offset += t
    if not ids:  # every completion mask is empty: one row of the first prompt, nothing scored
        ids, positions, labels, segments = [[prompts[0]]], [[torch.arange(prompts[0].numel())]], \
            [[torch.full((prompts[0].numel(),), IGNORE)]], [[torch.zeros(prompts[0].numel(), dtype=torch.long)]]
    ids, positions, labels, segments = ([torch.cat(parts) for parts in x] for x in (ids, positions, labels, segments))
    return ids, positions, labels, segments, sources


def _stack(parts: list[torch.Tensor], fill: int, width: int, device: torch.device) -> torch.Tensor:
    """Rows of different lengths as one [R, width] tensor on ``device``, right-filled with ``fill``."""
    out = torch.full((len(parts), width), fill, dtype=torch.long)
    for r, part in enumerate(parts):
        out[r, : part.numel()] = part.cpu()
    return out.to(device)


def _block_mask(seg: torch.Tensor) -> torch.Tensor:
    """The [R, L, L] mask of the segment numbers ``seg`` [R, L] (-1: padding): the prompt causal, a
    segment attending to the prompt and causally to itself, a padding position to itself alone."""
    width, device = seg.size(1), seg.device
    q, k = seg[:, :, None], seg[:, None, :]
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    allowed = causal & (q >= 0) & ((k == 0) | (k == q))
    allowed |= torch.eye(width, dtype=torch.bool, device=device)  # a padding position attends to itself
    return allowed


def _scored(sources: list[tuple[int, int, int, int]], shape: torch.Size, width: int, device: torch.device
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The completion positions that were scored [B, T], and each one's flat index into the
    packed positions, in row-major order."""
    scored = torch.zeros(shape, dtype=torch.bool, device=device)
    where = []
    for i, r, start, t in sorted(sources):
        scored[i, :t] = True
        where.append(torch.arange(r * width + start, r * width + start + t))
    return scored, torch.cat(where).to(device) if where else torch.zeros(0, dtype=torch.long, device=device)


def unpack(values: torch.Tensor, packed: Packed) -> torch.Tensor:
    """Per-position values [R, L] of a packed micro-batch in the [B, T] completion layout;
    unscored positions (completion padding) read 0. Differentiable."""
    out = values.new_zeros(packed.scored.shape)
    return out.masked_scatter(packed.scored, values.reshape(-1)[packed.where])


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask as the additive one eager attention adds to its scores."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)

