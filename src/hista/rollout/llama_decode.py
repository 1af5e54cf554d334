"""Decode steps of Llama-family decoders on CPU without transformers' module stack (SPEC §7, §12).

On two cores, a batch-16 decode step of the embedded model spends about a third of its time
outside its linear layers, and much of that is Python: some 400 module calls, the cache object,
the attention interface and the slicing of packed products, each a few microseconds. For the
decoders whose layer is Llama's (pre-norm residual blocks, rotary attention with grouped KV
heads, a gated MLP, full attention: Llama, Qwen2, Mistral without a sliding window), a
:class:`Decoder` runs the same float32 operations in the same order straight on the packed
weights of :mod:`hista.models.packed`, with the shared-prefix attention of
:mod:`hista.rollout.prefix_attention` and each row's generated keys and values in buffers
reserved for the whole completion. Norms, activations, embeddings and rotary tables stay the
model's own modules. Its logits equal those of the module stack up to float rounding
(tests/test_rollout.py); other models decode through the module stack.
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

import torch

from ..models import packed
from ..models.forward import cache_argument
from . import prefix_attention
from .sampling import completion_length, pick, uniforms

#: model types whose decoder layer is Llama's
FAMILY = ("llama", "qwen2", "mistral")
#: distinct prefixes encoded per forward pass when rows start, shortest first (little padding)
PREFILL_PREFIXES = 16


def _layers(model: torch.nn.Module) -> list:
    return list(getattr(getattr(model, "model", None), "layers", None) or [])


def supported(model: torch.nn.Module) -> bool:
    """Whether :class:`Decoder` can run ``model``'s decode steps (SPEC §7): a float32 CPU model of
    :data:`FAMILY` with full attention everywhere (:func:`prefix_attention.supported`), whose
    layers have Llama's modules, and oneDNN's packed linears available."""
    layers = _layers(model)
    parts = ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
             "self_attn.v_proj", "self_attn.o_proj", "self_attn.scaling", "mlp.gate_proj", "mlp.up_proj",
             "mlp.down_proj", "mlp.act_fn")

    def has(owner, name: str) -> bool:
        for part in name.split("."):
            owner = getattr(owner, part, None)
        return owner is not None

    return (getattr(model.config, "model_type", None) in FAMILY and bool(layers)
            and all(has(model, name) for name in ("lm_head", "model.embed_tokens", "model.rotary_emb", "model.norm"))
            and all(has(layer, name) for layer in layers for name in parts)
            and not any(hasattr(layer.self_attn, "q_norm") for layer in layers)
            and all(p.dtype == torch.float32 for p in model.parameters())
            and packed.available(model) and prefix_attention.supported(model))


class Decoder:
    """Decode steps of ``model`` (see :func:`supported`) over ``slots`` rows, each holding one
    sequence's keys and values (its prefix, then the tokens it generated) in a buffer of
    ``capacity`` positions per layer. A row's attention reads its own positions only, so rows of
    any lengths decode together, and a finished row's slot takes a new sequence at once
    (:meth:`load`). Its products use the packed weights that
    :func:`hista.models.packed.packed_linears` uses (packed once per version of the weights)."""

    def __init__(self, model: torch.nn.Module, slots: int, capacity: int):
        self.inner = inner = model.model
        first = inner.layers[0].self_attn
        self.heads, self.kv_heads, self.dim = (model.config.num_attention_heads, model.config.num_key_value_heads,
                                               first.head_dim)
        self.layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append((layer.input_layernorm, packed.product([attn.q_proj, attn.k_proj, attn.v_proj]),
                                packed.product([attn.o_proj]), attn.scaling, layer.post_attention_layernorm,
                                packed.product([mlp.gate_proj, mlp.up_proj]), mlp.gate_proj.out_features,
                                mlp.act_fn, packed.product([mlp.down_proj])))
        self.head = packed.product([model.lm_head])
        weight = first.q_proj.weight
        shape = (slots, self.kv_heads, capacity, self.dim)
        self.keys = [weight.new_zeros(shape) for _ in self.layers]
        self.values = [weight.new_zeros(shape) for _ in self.layers]
        self.lengths = torch.zeros(slots, dtype=torch.long, device=weight.device)

    def load(self, slots: list[int], keys: list[torch.Tensor], values: list[torch.Tensor], valid: torch.Tensor,
             sources: list[int]) -> None:
        """Put sequences into ``slots``: slot ``slots[k]`` gets the positions of row ``sources[k]``
        of a prefill's per-layer ``keys`` / ``values`` ([N, KV, W, D]) that ``valid`` [N, W] marks
        (:func:`prefill`), in order."""
        for slot, source in zip(slots, sources):
            where = valid[source].nonzero()[:, 0]
            for mine, theirs in ((self.keys, keys), (self.values, values)):
                for buffer, cached in zip(mine, theirs):
                    buffer[slot, :, : len(where)] = cached[source].index_select(1, where)
            self.lengths[slot] = len(where)

    def select(self, index: torch.Tensor) -> None:
        """Keep the slots ``index`` (in order), as the sampler compacts the batch once no
        sequence is waiting for a slot."""
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]
        self.lengths = self.lengths.index_select(0, index)

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """The float32 next-token logits [B, V] after feeding ``tokens`` [B, 1], one per slot, each
        at its slot's next position (SPEC §7). Slots not ``active`` [B] (empty, or waiting for a
        sequence) compute a throwaway row and keep their length."""
        rows, heads, kv_heads, dim = tokens.shape[0], self.heads, self.kv_heads, self.dim
        position = self.lengths.view(rows, 1)
        x = self.inner.embed_tokens(tokens[:, 0])
        cos, sin = self.inner.rotary_emb(x, position)  # [B, 1, D]: one table for every head
        half, every = dim // 2, torch.arange(rows, device=tokens.device)
        span = int(self.lengths.max()) + 1
        # each row reads its own positions: those it holds and the one it writes now
        mask = torch.zeros(rows, 1, 1, span, device=x.device).masked_fill_(
            torch.arange(span, device=x.device) > position.view(rows, 1, 1, 1), float("-inf"))
        for i, (norm, qkv_proj, o_proj, scale, mlp_norm, gate_up, width, act, down) in enumerate(self.layers):
            qkv = qkv_proj(norm(x))
            qk = qkv[:, : (heads + kv_heads) * dim].view(rows, heads + kv_heads, dim)
            qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin  # rotary, as transformers'
            self.keys[i][every, :, self.lengths] = qk[:, heads:]
            self.values[i][every, :, self.lengths] = qkv[:, (heads + kv_heads) * dim :].view(rows, kv_heads, dim)
            query = qk[:, :heads].view(rows, kv_heads, heads // kv_heads, dim)
            scores = torch.matmul(query, self.keys[i][:, :, :span].transpose(-1, -2)).mul_(scale).add_(mask)
            out = torch.matmul(scores.softmax(dim=-1), self.values[i][:, :, :span])
            x = x + o_proj(out.reshape(rows, heads * dim))
            hidden = gate_up(mlp_norm(x))
            x = x + down(act(hidden[:, :width]) * hidden[:, width:])
        self.lengths += active.to(self.lengths.dtype)
        return self.head(self.inner.norm(x)).float()


def prefill(model: torch.nn.Module, prefixes: Sequence[Sequence[int]], pad: int,
            head: Optional[tuple[list[torch.Tensor], list[torch.Tensor]]] = None
            ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Per-layer keys and values [N, KV, W, D] of ``prefixes``, which of the W positions hold
    them [N, W] (the others are padding), and the float32 logits of each one's next token
    [N, V], from one forward pass through the model's module stack (SPEC §7). ``head``: the
    per-layer keys and values [1, KV, H, D] of the first H tokens, which every prefix starts
    with, encoded once before (vLLM's prefix caching): only the tokens after them are encoded."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    start = head[0][0].shape[2] if head else 0
    rest = [list(p)[start:] for p in prefixes]
    width = max(len(p) for p in rest)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in rest], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rest], device=device)
    cache = DynamicCache(config=model.config)
    positions = (mask.cumsum(-1) - 1).clamp(min=0) + start
    if head:
        for layer, (keys, values) in enumerate(zip(*head)):
            cache.update(keys.expand(len(rest), -1, -1, -1), values.expand(len(rest), -1, -1, -1), layer)
        mask = torch.cat([mask.new_ones(len(rest), start), mask], dim=1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                   **{cache_argument(model): cache}).logits[:, -1].float()
    return [layer.keys for layer in cache.layers], [layer.values for layer in cache.layers], mask.bool(), logits


def _head(model: torch.nn.Module, prefixes: Sequence[Sequence[int]], pad: int):
    """The keys and values of the tokens every prefix starts with (at least 16 of them, and one
    token short of the shortest prefix), encoded once for :func:`prefill`; None when they are
    fewer: a chat template's system prompt is the usual head of distinct prompts."""
    length = min(len(os.path.commonprefix([list(p) for p in prefixes])), min(len(p) for p in prefixes) - 1)
    if length < 16:
        return None
    keys, values, _, _ = prefill(model, [list(prefixes[0])[:length]], pad)
    return keys, values


@torch.inference_mode()
def sample(model: torch.nn.Module, prefixes: Sequence[Sequence[int]], sources: Sequence[int], *, seeds: Sequence[int],
           batch_size: int, max_new_tokens: int, temperature: float, top_p: float, eos: Sequence[int], pad: int,
           ignore_eos: bool = False, done: Optional[Callable[[int, list[int], list[float]], None]] = None
           ) -> list[tuple[list[int], list[float]]]:
    """:func:`hista.rollout.engine.sample_continuations` for a supported model (SPEC §7), by
    continuous batching: at most ``batch_size`` rows decode together, in slots of a
    :class:`Decoder`; rows start in order, and as rows finish, waiting rows take their slots
    (prefilled together once an eighth of the slots is free, or when nothing else runs), each
    distinct prefix of a refill encoded once, and the head all prefixes share (a chat template's
    system prompt) encoded once for the whole call. Once no row waits, finished rows are dropped
    from the batch as they accumulate. Row r's tokens come from its own uniforms
    (:func:`hista.rollout.sampling.uniforms` of ``seeds[r]``), so they do not depend on which rows
    it decodes beside."""
    device = next(model.parameters()).device
    slots = min(batch_size, len(sources))
    decoder = Decoder(model, slots, max(len(p) for p in prefixes) + max_new_tokens)
    stop = set(eos)
    row_of = [-1] * slots  # the row each slot decodes (-1: free)
    waiting = list(range(len(sources)))[::-1]  # rows not started yet, the next one last
    tokens: list[list[int]] = [[] for _ in sources]
    logps: list[list[float]] = [[] for _ in sources]
    out: list[Optional[tuple[list[int], list[float]]]] = [None] * len(sources)
    logits = torch.zeros(slots, model.config.vocab_size, device=device)

    head = _head(model, prefixes, pad) if len(prefixes) > 1 else None

    def start(free: list[int]) -> None:
        rows = [waiting.pop() for _ in free[: len(waiting)]]
        slot_of = dict(zip(rows, free))
        used = sorted({sources[r] for r in rows}, key=lambda p: len(prefixes[p]))
        for first in range(0, len(used), PREFILL_PREFIXES):  # prefixes of similar lengths together: little padding
            part = used[first : first + PREFILL_PREFIXES]
            keys, values, valid, next_logits = prefill(model, [prefixes[p] for p in part], pad, head)
            mine = [r for r in rows if sources[r] in part]
            which = [part.index(sources[r]) for r in mine]
            decoder.load([slot_of[r] for r in mine], keys, values, valid, which)
            for row, k in zip(mine, which):
                row_of[slot_of[row]] = row
                logits[slot_of[row]] = next_logits[k]

    start(list(range(slots)))
    while True:
        busy = [s for s in range(slots) if row_of[s] >= 0]
        if not busy:
            break
        # every slot's token (a free slot's row of logits is stale and its token unused): cheaper
        # than gathering the busy rows' logits
        chosen, chosen_logp = pick(logits, temperature, top_p,
                                   uniforms([seeds[r] if r >= 0 else 0 for r in row_of],
                                            [len(tokens[r]) if r >= 0 else 0 for r in row_of], device))
        feed, active = chosen, [False] * slots
        picked, picked_logp = chosen[:, 0].tolist(), chosen_logp[:, 0].tolist()
        for slot in busy:
            row, t = row_of[slot], picked[slot]
            tokens[row].append(t)
            logps[row].append(picked_logp[slot])
            if len(tokens[row]) == max_new_tokens or (t in stop and not ignore_eos):
                k = len(tokens[row]) if ignore_eos else completion_length(tokens[row], eos)
                out[row] = (tokens[row][:k], logps[row][:k])
                if done:
                    done(row, *out[row])
                row_of[slot] = -1
            else:
                active[slot] = True
        free = [s for s in range(slots) if row_of[s] < 0]
        if any(active):
            if not waiting and len(free) * 8 >= slots:  # no row waits: drop the finished ones
                keep = [s for s in range(slots) if row_of[s] >= 0]
                index = torch.tensor(keep, device=device)
                decoder.select(index)
                feed, active = feed[index], [active[s] for s in keep]
                row_of, slots, free = [row_of[s] for s in keep], len(keep), []
            # the next logits of every slot: stale for a free slot until a row starts there
            logits = decoder.step(feed, torch.tensor(active, device=device))
        if waiting and free and (len(free) * 8 >= slots or not any(active)):
            start(free)
    return out
