"""One batched forward pass over prompt + completion tokens (SPEC §7, ARCHITECTURE: hidden
states are computed once, where the log-probs are computed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from .loading import LoadedModel


@dataclass
class ForwardOutput:
    """Per-sequence results: ``logprobs[i]`` and ``entropies[i]`` have one entry per completion
    token; ``hidden[i]`` is ``[len(prompt) + len(completion), H]`` (None if not requested)."""

    logprobs: list[torch.Tensor]
    entropies: list[torch.Tensor]
    hidden: Optional[list[torch.Tensor]]


@torch.no_grad()
def forward(
    lm: LoadedModel,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    layer: Optional[int] = -1,
    temperature: float = 1.0,
    batch_size: int = 8,
) -> ForwardOutput:
    """Log-probs and entropies of every completion token (under logits / ``temperature``),
    and the hidden states of ``layer`` for every prompt + completion position (SPEC §3, §4.3).

    ``layer`` indexes transformers' ``hidden_states`` tuple: -1 (default) is the last layer
    after the final norm, 0 the embeddings; None skips hidden states. Sequences are
    right-padded into micro-batches of ``batch_size``; padding never changes a result beyond
    float rounding. Outputs are float32 on the CPU.
    """
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    pad = lm.tokenizer.pad_token_id or 0
    device = lm.device
    logprobs, entropies, hidden = [], [], ([] if layer is not None else None)
    for start in range(0, len(prompt_ids), batch_size):
        prompts = [list(p) for p in prompt_ids[start : start + batch_size]]
        comps = [list(c) for c in completion_ids[start : start + batch_size]]
        lengths = [len(p) + len(c) for p, c in zip(prompts, comps)]
        width = max(lengths)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, (p, c) in enumerate(zip(prompts, comps)):
            ids[row, : len(p) + len(c)] = torch.tensor(p + c, dtype=torch.long)
            mask[row, : len(p) + len(c)] = 1
        out = lm.model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            output_hidden_states=layer is not None,
            use_cache=False,
        )
        logits = out.logits.float() / temperature
        for row, (p, c) in enumerate(zip(prompts, comps)):
            # the logit at position n predicts token n + 1
            step = logits[row, len(p) - 1 : len(p) + len(c) - 1]
            logp = torch.log_softmax(step, dim=-1)
            token = torch.tensor(c, dtype=torch.long, device=logp.device)
            logprobs.append(logp.gather(-1, token[:, None]).squeeze(-1).cpu())
            entropies.append(-(logp.exp() * logp).sum(-1).cpu())
            if hidden is not None:
                hidden.append(out.hidden_states[layer][row, : lengths[row]].float().cpu())
    return ForwardOutput(logprobs, entropies, hidden)
