"""DAPO's dynamic sampling (docs/training.md "Dynamic sampling").

A group whose G rewards are all equal (all 0 or all 1) gives every GRPO-family advantage 0: it
carries no signal. With dynamic sampling a training step keeps the groups with unequal rewards
("informative"), samples more prompts for the ones it is missing, and trains on exactly the
configured number of whole groups. A step spends at most ``max_rounds`` extra generation rounds;
when they are spent it fills the batch with the earliest groups with equal rewards, and says so.

Every process keeps its own quota of whole groups (the groups of a process's slice stay on it);
every process sees the gathered rewards, so all of them agree on what is kept and on the number
of rounds without another exchange. The prompts of extra round ``r`` of optimiser step ``s``
are a function of (seed, s): the next prompts of a permutation of the training set drawn for
the step, so a resumed run draws and keeps what the uninterrupted run did.

The functions here are plain data and tensor operations; the trainer calls them
(:meth:`hista.train.trainer.HistaGRPOTrainer._sample_informative`).
"""

from __future__ import annotations

import random
from typing import Any, Optional, Union

import torch

from ..sharding import derive_seed

#: extra generation rounds a step may spend when the recipe says ``dynamic_sampling: true``
DEFAULT_MAX_ROUNDS = 4
#: the most a recipe may allow: each round is a whole generation batch, so 1000 rounds make one
#: step cost a thousand steps' sampling (DAPO's reference setting allows 10)
MAX_ROUNDS = 1000
#: losses for which dynamic sampling is on unless the recipe says otherwise (DAPO as published)
ON_BY_DEFAULT = ("dapo",)
#: keys of a ``dynamic_sampling`` mapping
KEYS = ("max_rounds",)

#: completion-side tensors [B, C] of TRL's generation output and their padding value (None: the
#: tokenizer's pad id); the prompt side is left-padded, the completion side right-padded
COMPLETION_PAD = {"completion_ids": None, "completion_mask": 0, "old_per_token_logps": 0.0,
                  "sampling_per_token_logps": 0.0, "ref_per_token_logps": 0.0, "old_entropies": 0.0,
                  "tool_mask": 1, "importance_sampling_ratio": 1.0}
PROMPT_PAD = {"prompt_ids": None, "prompt_mask": 0}


def resolve(setting: Union[bool, dict, None], loss_name: str) -> Union[bool, dict]:
    """The recipe's ``dynamic_sampling`` as a run uses it: False (off) or
    ``{"max_rounds": n}``. None (not set) is on for the ``dapo`` loss (:data:`ON_BY_DEFAULT`)
    and off for the others; true is ``max_rounds`` :data:`DEFAULT_MAX_ROUNDS`. A ValueError
    says what is wrong with a mapping (an unknown key, ``max_rounds`` missing, not an integer
    in [0, :data:`MAX_ROUNDS`])."""
    if setting is None:
        setting = loss_name in ON_BY_DEFAULT
    if setting is False:
        return False
    if setting is True:
        return {"max_rounds": DEFAULT_MAX_ROUNDS}
    unknown = [k for k in setting if k not in KEYS]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; valid: {', '.join(KEYS)}")
    rounds = setting.get("max_rounds")
    if "max_rounds" not in setting:
        raise ValueError("a mapping needs max_rounds: how many extra generation rounds a step may spend")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 0 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"max_rounds={rounds!r}: must be an integer in [0, {MAX_ROUNDS}]")
    return {"max_rounds": rounds}


def informative(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Which groups of ``group_size`` consecutive rewards are not all equal [N / G]."""
    grouped = rewards.reshape(-1, group_size)
    return grouped.max(dim=1).values != grouped.min(dim=1).values


def extra_prompts(dataset_size: int, seed: int, step: int, round_: int, per_round: int) -> list[int]:
    """Dataset indices of the prompts of extra round ``round_`` (1, 2, ...) at optimiser step
    ``step``: ``per_round`` successive prompts of a permutation of the dataset drawn from
    (seed, step), cycling when the rounds need more than the dataset holds."""
    order = list(range(dataset_size))
    random.Random(derive_seed(seed, "dynamic-sampling", step)).shuffle(order)
    first = (round_ - 1) * per_round
    return [order[(first + k) % dataset_size] for k in range(per_round)]


def choose(flags: list[torch.Tensor], quota: int) -> tuple[list[list[tuple[int, int]]], int]:
    """The groups each process trains on: ``flags`` holds, per round, which groups of each
    process's slice are informative [processes, groups per process]. Each process takes its
    informative groups in round order up to ``quota``; one that found fewer fills the rest with
    its earliest groups with equal rewards. Returns, per process, its (round, group) picks in
    round and group order, and the number of filled groups over all processes."""
    picks, filled = [], 0
    for process in range(flags[0].size(0)):
        found = [(r, g) for r, f in enumerate(flags) for g in range(f.size(1)) if bool(f[process, g])]
        chosen = found[:quota]
        if len(chosen) < quota:
            rest = [(r, g) for r, f in enumerate(flags) for g in range(f.size(1)) if not bool(f[process, g])]
            filled += quota - len(chosen)
            chosen += rest[: quota - len(chosen)]
        picks.append(sorted(chosen))
    return picks, filled


def enough(flags: list[torch.Tensor], quota: int) -> bool:
    """Whether every process has found ``quota`` informative groups in the rounds so far."""
    return bool((sum(f.sum(dim=1) for f in flags) >= quota).all())


def _pad(t: torch.Tensor, width: int, value: Any, left: bool) -> torch.Tensor:
    missing = width - t.size(1)
    if missing <= 0:
        return t
    block = torch.full((t.size(0), missing, *t.shape[2:]), value, dtype=t.dtype, device=t.device)
    return torch.cat([block, t] if left else [t, block], dim=1)


def merge(parts: list[tuple[dict, Optional[torch.Tensor], list[int]]],
          pad_id: int) -> tuple[dict, Optional[torch.Tensor]]:
    """The rows ``rows`` of each round's generation output ``out`` (and its captured hidden
    states [B, P + C, H], or None), in order, as one output: prompt-side tensors left-padded,
    completion-side ones right-padded to the widest round (:data:`PROMPT_PAD`,
    :data:`COMPLETION_PAD`), TRL's per-row ``advantages`` concatenated. A key this function does
    not know is a ValueError (dynamic sampling does not handle it)."""
    keys = set(parts[0][0])
    known = set(PROMPT_PAD) | set(COMPLETION_PAD) | {"advantages", "num_items_in_batch"}
    if keys - known:
        raise ValueError(f"dynamic sampling cannot merge the generation output's {sorted(keys - known)}")
    merged: dict = {}

    def sequence_level(key: str) -> bool:  # TRL's sequence-level importance ratio is [B, 1] in every round
        return key == "importance_sampling_ratio" and all(out[key].size(1) == 1 for out, _, _ in parts)

    prompt_width = max(out["prompt_ids"].size(1) for out, _, _ in parts)
    completion_width = max(out["completion_ids"].size(1) for out, _, _ in parts)
    for key in keys - {"num_items_in_batch"}:
        pieces = []
        for out, _, rows in parts:
            t = out[key][rows]
            if key in PROMPT_PAD:
                t = _pad(t, prompt_width, pad_id if PROMPT_PAD[key] is None else PROMPT_PAD[key], left=True)
            elif key in COMPLETION_PAD and t.dim() >= 2 and not sequence_level(key):
                t = _pad(t, completion_width, pad_id if COMPLETION_PAD[key] is None else COMPLETION_PAD[key],
                         left=False)
            pieces.append(t)
        merged[key] = torch.cat(pieces, dim=0)
    hidden = None
    if parts[0][1] is not None:
        pieces = []
        for out, h, rows in parts:
            p = out["prompt_ids"].size(1)
            pieces.append(torch.cat([_pad(h[rows, :p], prompt_width, 0.0, left=True),
                                     _pad(h[rows, p:], completion_width, 0.0, left=False)], dim=1))
        hidden = torch.cat(pieces, dim=0)
    return merged, hidden
