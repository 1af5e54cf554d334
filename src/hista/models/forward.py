"""One batched forward pass over prompt + completion tokens: hidden
states are computed once, where the log-probs are computed."""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from .loading import LoadedModel
from .packed import packed_linears


@dataclass
class ForwardOutput:
    """Per-sequence results: ``logprobs[i]`` and ``entropies[i]`` have one entry per completion
    token; ``hidden[i]`` is ``[len(prompt) + len(completion), H]`` (None if not requested)."""

    logprobs: list[torch.Tensor]
    entropies: list[torch.Tensor]
    hidden: Optional[list[torch.Tensor]]


def _padded(prompts: list[list[int]], comps: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input ids and attention mask of prompt + completion rows."""
    width = max(len(p) + len(c) for p, c in zip(prompts, comps))
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, (p, c) in enumerate(zip(prompts, comps)):
        ids[row, : len(p) + len(c)] = torch.tensor(p + c, dtype=torch.long)
        mask[row, : len(p) + len(c)] = 1
    return ids, mask


def cache_argument(model) -> str:
    """The name under which this transformers version's ``forward`` takes a KV cache:
    ``cache`` (5.2x) or ``past_key_values`` (earlier)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def decoder_layers(model: torch.nn.Module) -> int:
    """The number of decoder layers of a transformers model (its text config's
    ``num_hidden_layers``), what an estimator's relative-depth layer rule reads (SPEC §4.3)."""
    config = model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(config.num_hidden_layers)


def hidden_state_count(lm: LoadedModel) -> int:
    """How many hidden states transformers' ``hidden_states`` tuple of this model holds: its
    number of layers + 1 (the embeddings), so valid layers are ``-count .. count - 1`` (SPEC
    §4.3)."""
    return decoder_layers(lm.model) + 1


def _layer_index(layer: int, count: int) -> int:
    """``layer`` as an index 0..count-1 of the ``hidden_states`` tuple, or an IndexError naming it."""
    if not -count <= layer < count:
        raise IndexError(f"layer {layer} does not exist: the model has {count} hidden states "
                         f"(layers {-count} to {count - 1})")
    return layer % count


@torch.no_grad()
def hidden_states(lm: LoadedModel, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                  *, layer: int = -1, layers: Optional[Sequence[int]] = None,
                  batch_size: int = 8) -> list[torch.Tensor] | dict[int, list[torch.Tensor]]:
    """The hidden states of ``layer`` (as in :func:`forward`) for every prompt + completion
    position, ``[len(prompt) + len(completion), H]`` per sequence, float32 on the CPU (SPEC
    §4.3, §8). Runs the model without its output head (no vocabulary logits, log-probs or
    entropies), and encodes a prompt that several sequences share once: its KV cache is copied
    to each of them, as when the G rollouts of one problem are evaluated together.

    With ``layers`` (a list of layers) one forward pass gives all of them: the result is then a
    dict layer -> the per-sequence list (``layer`` is ignored); two names of one layer (-1 and
    count - 1) share their tensors. A layer the model does not have raises an IndexError naming
    it (:func:`hidden_state_count` tells the valid range)."""
    return model_hidden_states(lm.model, prompt_ids, completion_ids, layer=layer, layers=layers,
                               batch_size=batch_size, pad=lm.tokenizer.pad_token_id or 0)


@torch.no_grad()
def model_hidden_states(model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]],
                        completion_ids: Sequence[Sequence[int]], *, layer: int = -1,
                        layers: Optional[Sequence[int]] = None, batch_size: int = 8,
                        pad: int = 0) -> list[torch.Tensor] | dict[int, list[torch.Tensor]]:
    """:func:`hidden_states` of a transformers causal LM ``model`` without a LoadedModel around
    it (SPEC §4.3): ``pad`` fills the micro-batches' padding (masked out)."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    wanted = [layer] if layers is None else [int(x) for x in layers]
    count = decoder_layers(model) + 1
    index = {w: _layer_index(w, count) for w in wanted}
    picked = sorted(set(index.values()))
    with packed_linears(model):
        per_index = shared_prefix_hidden(model.base_model, prompt_ids, completion_ids, picked, batch_size, pad=pad)
    if layers is None:
        return per_index[index[layer]]
    return {w: per_index[index[w]] for w in wanted}


def shared_prefix_hidden(model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]],
                         completion_ids: Sequence[Sequence[int]], picked: Sequence[int], batch_size: int, *,
                         pad: int = 0) -> dict[int, list[torch.Tensor]]:
    """Entries ``picked`` of the ``hidden_states`` tuple of a transformers base ``model`` for
    every prompt + completion position, float32 on the CPU, [len(prompt) + len(completion), H]
    per row (SPEC §4.3): rows are grouped by prompt, a prompt is encoded once, and its KV cache
    is copied to micro-batches of ``batch_size`` of its completions (length-sorted, padded with
    ``pad``), each from a copy of the prompt's cache."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    by_prompt: dict[tuple, list[int]] = {}
    for row, prompt in enumerate(prompt_ids):
        by_prompt.setdefault(tuple(prompt), []).append(row)
    out: dict[int, list[Optional[torch.Tensor]]] = {k: [None] * len(prompt_ids) for k in picked}
    for prompt, rows in by_prompt.items():
        rows.sort(key=lambda r: -len(completion_ids[r]))  # similar lengths share a micro-batch: less padding
        encoded = DynamicCache(config=model.config)
        states = model(input_ids=torch.tensor([prompt], device=device), use_cache=True, output_hidden_states=True,
                       **{cache_argument(model): encoded}).hidden_states
        head = {k: states[k][0].float().cpu() for k in picked}
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            comps = [list(completion_ids[r]) for r in chunk]
            width = max(len(c) for c in comps)
            if width == 0:
                for k in picked:
                    for r in chunk:
                        out[k][r] = head[k].clone()
                continue
            cache = copy.deepcopy(encoded)
            cache.batch_select_indices(torch.zeros(len(chunk), dtype=torch.long, device=device))
            ids = torch.tensor([c + [pad] * (width - len(c)) for c in comps], device=device)
            mask = torch.tensor([[1] * (len(prompt) + len(c)) + [0] * (width - len(c)) for c in comps], device=device)
            positions = torch.arange(len(prompt), len(prompt) + width, device=device).expand(len(chunk), -1)
            tail = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         output_hidden_states=True, **{cache_argument(model): cache}).hidden_states
            for k in picked:
                for j, (r, c) in enumerate(zip(chunk, comps)):
                    out[k][r] = torch.cat([head[k], tail[k][j, : len(c)].float().cpu()])
    return out


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
    with packed_linears(lm.model):
        for start in range(0, len(prompt_ids), batch_size):
            prompts = [list(p) for p in prompt_ids[start : start + batch_size]]
            comps = [list(c) for c in completion_ids[start : start + batch_size]]
            lengths = [len(p) + len(c) for p, c in zip(prompts, comps)]
            ids, mask = _padded(prompts, comps, pad)
            out = lm.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                           output_hidden_states=layer is not None, use_cache=False)
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
