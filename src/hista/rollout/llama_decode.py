"""Decode steps of Llama-family decoders on CPU without transformers' module stack.

On two cores, a batch-16 decode step of the embedded model spends about a third of its time
outside its linear layers, and much of that is Python: some 400 module calls, the cache object,
the attention interface and the slicing of packed products, each a few microseconds. For the
decoders whose layer is Llama's (pre-norm residual blocks, rotary attention with grouped KV
heads, a gated MLP, full attention: Llama, Qwen2, Mistral without a sliding window), a
:class:`Decoder` runs the same float32 operations in the same order straight on the packed
weights of :mod:`hista.models.packed`, each row's keys and values (its prompt's, then those of the
tokens it generated) in a buffer reserved for the whole completion. Prompts are encoded the same
way, the tokens of several prompts in one ragged batch: through transformers' module stack, a
prefill of eight 33-token prompts took three times as long as its linear layers alone. A decode
step's attention reads each run of neighbouring slots up to that run's longest row only, and
the sampler keeps its rows longest first, so that rows of an evaluation (lengths from a few
tokens to the completion cap) read about their own lengths rather than the longest row's. Norms,
activations, embeddings and rotary tables stay the model's own modules. Its logits equal those
of the module stack up to float rounding (tests/rollout/test_rollout.py); other models decode through
the module stack.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple, Optional, Sequence

import torch

from ..models import packed
from . import prefix_attention
from .sampling import completion_length, pick, uniforms

#: model types whose decoder layer is Llama's
FAMILY = ("llama", "qwen2", "mistral")
#: distinct prefixes encoded per :meth:`Decoder.fill` when rows start, shortest first (little padding
#: in their attention)
PREFILL_PREFIXES = 16
#: slots per run of a decode step's attention (:meth:`Decoder.chunks`), and what a separate run
#: costs, in positions read per row of the run (the launch of its five operations per layer)
CHUNK, CALL_POSITIONS = 8, 24


def _layers(model: torch.nn.Module) -> list:
    return list(getattr(getattr(model, "model", None), "layers", None) or [])


def supported(model: torch.nn.Module) -> bool:
    """Whether :class:`Decoder` can run ``model``'s decode steps: a float32 CPU model of
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


class _Ragged(NamedTuple):
    """The layout of a ragged prefill (:meth:`Decoder.fill`): ``count`` prefixes of at most
    ``width`` tokens each after the ``lead`` common ones, ``total`` tokens in all; each
    prefix's first slot, and per token its row of the padded attention, its slot and its
    position."""

    count: int
    width: int
    total: int
    lead: int
    first: torch.Tensor
    padded: torch.Tensor
    slot: torch.Tensor
    position: torch.Tensor


def _causal_mask(width: int, lead: int, device: torch.device) -> torch.Tensor:
    """The additive mask [width, lead + width] of a prefill's padded attention: query t of a
    prefix reads positions up to its own (lead + t)."""
    span = lead + width
    keys_at = torch.arange(span, device=device)
    return torch.zeros(width, span, device=device).masked_fill_(
        keys_at > (lead + torch.arange(width, device=device)).view(width, 1), float("-inf"))


class Decoder:
    """Decode steps of ``model`` (see :func:`supported`) over ``slots`` rows, each holding one
    sequence's keys and values (its prefix, then the tokens it generated) in a buffer of
    ``capacity`` positions per layer. A row's attention reads its own positions only, so rows of
    any lengths decode together, and a finished row's slot takes a new sequence at once
    (:meth:`fill`). Its products use the packed weights that
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
        # keys stored position-minor (a view [slots, KV, capacity, D] of [slots, KV, D, capacity]): a
        # query's scores then multiply the keys untransposed, a third faster on CPU than through
        # a transposed operand
        self.keys = [weight.new_zeros(shape[:2] + shape[:1:-1]).transpose(-1, -2) for _ in self.layers]
        self.values = [weight.new_zeros(shape) for _ in self.layers]
        self.lengths = torch.zeros(slots, dtype=torch.long, device=weight.device)

    @torch.inference_mode()
    def fill(self, prefixes: Sequence[Sequence[int]], slots: Sequence[Sequence[int]],
             common: Optional[tuple[list[torch.Tensor], list[torch.Tensor]]] = None) -> torch.Tensor:
        """Encode ``prefixes`` into their ``slots`` (prefix j into every slot of ``slots[j]``) and
        return the float32 logits of each one's next token [N, V]. The tokens of all
        prefixes go through the packed products in one ragged batch (no padding), each prefix
        attending causally to its own positions; ``common``: the per-layer keys and values
        [KV, C, D] of the first C tokens every prefix starts with (:func:`_common`), copied into
        the slots instead of encoded again."""
        device, lead = self.lengths.device, common[0][0].shape[1] if common else 0
        sizes = [len(p) - lead for p in prefixes]
        at = self._ragged(sizes, lead, torch.tensor([s[0] for s in slots], device=device))
        x = self.inner.embed_tokens(torch.tensor([t for p in prefixes for t in list(p)[lead:]], device=device))
        cos, sin = self.inner.rotary_emb(x, at.position.view(1, -1))
        rotary = cos.view(at.total, 1, self.dim), sin.view(at.total, 1, self.dim)
        mask = _causal_mask(at.width, lead, device)
        for i in range(len(self.layers)):
            x = self._fill_layer(i, x, at, rotary, mask, common)
        self._copy_to_samples(slots, [lead + size for size in sizes])
        last = torch.tensor(sizes, device=device).cumsum(0) - 1
        return self.head(self.inner.norm(x.index_select(0, last))).float()

    def _ragged(self, sizes: list[int], lead: int, first: torch.Tensor) -> _Ragged:
        """Where each token of a ragged prefill goes: token t of prefix j (``sizes[j]`` tokens
        after the ``lead`` common ones) into slot ``first[j]`` at position lead + t, and row
        j * width + t of the padded attention."""
        device = self.lengths.device
        count, width, total = len(sizes), max(sizes), sum(sizes)
        which = torch.repeat_interleave(torch.arange(count, device=device), torch.tensor(sizes, device=device))
        offset = torch.arange(total, device=device) - torch.tensor([0] + sizes[:-1], device=device).cumsum(0)[which]
        return _Ragged(count, width, total, lead, first, which * width + offset, first[which], offset + lead)

    def _fill_layer(self, i: int, x: torch.Tensor, at: _Ragged, rotary: tuple[torch.Tensor, torch.Tensor],
                    mask: torch.Tensor, common: Optional[tuple[list[torch.Tensor], list[torch.Tensor]]]
                    ) -> torch.Tensor:
        """Layer ``i`` of a ragged prefill: its keys and values stored in the slots (the common
        ones copied), each prefix's queries attending to its own positions; returns the residual
        stream after the layer."""
        norm, qkv_proj, o_proj, scale, mlp_norm, gate_up, size, act, down = self.layers[i]
        heads, kv_heads, dim = self.heads, self.kv_heads, self.dim
        (cos, sin), half, span, lead, first = rotary, dim // 2, at.lead + at.width, at.lead, at.first
        qkv = qkv_proj(norm(x))
        qk = qkv[:, : (heads + kv_heads) * dim].view(at.total, heads + kv_heads, dim)
        qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin
        if common:
            self.keys[i][first, :, :lead] = common[0][i]
            self.values[i][first, :, :lead] = common[1][i]
        self.keys[i][at.slot, :, at.position] = qk[:, heads:]
        self.values[i][at.slot, :, at.position] = qkv[:, (heads + kv_heads) * dim :].view(at.total, kv_heads, dim)
        query = qk.new_zeros(at.count * at.width, heads, dim).index_copy_(0, at.padded, qk[:, :heads])
        query = query.view(at.count, at.width, kv_heads, heads // kv_heads, dim).permute(0, 2, 3, 1, 4)
        keys, values = self.keys[i][first, :, :span].unsqueeze(2), self.values[i][first, :, :span].unsqueeze(2)
        scores = torch.matmul(query, keys.transpose(-1, -2)).mul_(scale).add_(mask)
        out = torch.matmul(scores.softmax(dim=-1), values)
        out = out.permute(0, 3, 1, 2, 4).reshape(at.count * at.width, heads * dim).index_select(0, at.padded)
        x = x + o_proj(out)
        hidden = gate_up(mlp_norm(x))
        return x + down(act(hidden[:, :size]) * hidden[:, size:])

    def _copy_to_samples(self, slots: Sequence[Sequence[int]], lengths: list[int]) -> None:
        """Copy each prefix's encoded positions from its first slot to its other slots (the
        samples of one prompt) and set every filled slot's length."""
        for targets, length in zip(slots, lengths):
            if len(targets) > 1:  # the samples of one prompt: copies of its first slot
                others = torch.tensor(targets[1:], device=self.lengths.device)
                for held in self._held(length):
                    held[others] = held[targets[0]]
            self.lengths[list(targets)] = length

    def _held(self, span: int) -> list[torch.Tensor]:
        """The first ``span`` positions of every slot's keys and values, per layer (keys, then
        values), sliced in the buffers' storage order so that copying them copies whole runs."""
        return [buffer.narrow(dim, 0, span) for buffer, dim in self._storage()]

    def _storage(self) -> list[tuple[torch.Tensor, int]]:
        """Every layer's keys and values in their storage order, each with its position dim."""
        return [(k.transpose(-1, -2), 3) for k in self.keys] + [(v, 2) for v in self.values]

    def select(self, index: torch.Tensor) -> None:
        """Keep the slots ``index`` (in order), as the sampler compacts the batch once no
        sequence is waiting for a slot: their positions in use move to the first slots of the
        same buffers (positions past them hold finite stale values that no row reads)."""
        span = int(self.lengths.max())
        for held in self._held(span):
            held[: len(index)] = held[index]
        self.keys, self.values = [k[: len(index)] for k in self.keys], [v[: len(index)] for v in self.values]
        self.lengths = self.lengths.index_select(0, index)

    def move(self, order: Sequence[int], first: int) -> None:
        """Move the sequences of slots ``order`` to slots ``first``, ``first + 1``, ... (their keys,
        values and lengths), as the sampler keeps its rows longest first. Each run of
        :data:`CHUNK` moved slots copies the positions its longest row holds."""
        index = torch.tensor(list(order), device=self.lengths.device)
        lengths = self.lengths.index_select(0, index)
        runs = [(a, min(a + CHUNK, len(order))) for a in range(0, len(order), CHUNK)]
        spans = [int(lengths[a:b].max()) for a, b in runs]
        for buffer, dim in self._storage():
            # every run read before any is written
            moved = [buffer.narrow(dim, 0, span)[index[a:b]] for (a, b), span in zip(runs, spans)]
            for (a, b), span, rows in zip(runs, spans, moved):
                buffer[first + a : first + b].narrow(dim, 0, span).copy_(rows)
        self.lengths[first : first + len(order)] = lengths

    def chunks(self) -> list[tuple[int, int, int]]:
        """The runs of slots (first, end, span) whose attention a step computes together, each
        reading ``span`` positions (its longest row's, and the one it writes): runs of
        :data:`CHUNK` slots merged where merging reads fewer positions than a separate call costs
        (:data:`CALL_POSITIONS` per row), so that rows kept longest first read about their own
        lengths instead of the longest row's."""
        rows = self.lengths.shape[0]
        ends = list(range(CHUNK, rows, CHUNK)) + [rows]
        spans = [int(s) + 1 for s in torch.nn.functional.pad(self.lengths, (0, -rows % CHUNK))
                 .view(-1, CHUNK).amax(dim=1).tolist()]
        runs = [[0, ends[0], spans[0]]]
        for end, span in zip(ends[1:], spans[1:]):
            first, last, widest = runs[-1]
            merged = (end - first) * max(widest, span)
            if merged <= (last - first) * widest + (end - last) * span + CALL_POSITIONS * CHUNK:
                runs[-1] = [first, end, max(widest, span)]
            else:
                runs.append([last, end, span])
        return [tuple(r) for r in runs]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """The float32 next-token logits [B, V] after feeding ``tokens`` [B, 1], one per slot, each
        at its slot's next position. Slots not ``active`` [B] (empty, or waiting for a
        sequence) compute a throwaway row and keep their length. Attention runs per run of
        :meth:`chunks`, each reading its rows' positions only up to its longest row."""
        rows, heads, kv_heads, dim = tokens.shape[0], self.heads, self.kv_heads, self.dim
        position = self.lengths.view(rows, 1)
        x = self.inner.embed_tokens(tokens[:, 0])
        cos, sin = self.inner.rotary_emb(x, position)  # [B, 1, D]: one table for every head
        half, every = dim // 2, torch.arange(rows, device=tokens.device)
        runs = self.chunks()
        # each row reads its own positions: those it holds and the one it writes now
        masks = [torch.zeros(end - first, 1, 1, span, device=x.device).masked_fill_(
            torch.arange(span, device=x.device) > position[first:end].view(-1, 1, 1, 1), float("-inf"))
            for first, end, span in runs]
        for i, (norm, qkv_proj, o_proj, scale, mlp_norm, gate_up, width, act, down) in enumerate(self.layers):
            qkv = qkv_proj(norm(x))
            qk = qkv[:, : (heads + kv_heads) * dim].view(rows, heads + kv_heads, dim)
            qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin  # rotary, as transformers'
            keys, values = self.keys[i], self.values[i]
            keys[every, :, self.lengths] = qk[:, heads:]
            values[every, :, self.lengths] = qkv[:, (heads + kv_heads) * dim :].view(rows, kv_heads, dim)
            query = qk[:, :heads].view(rows, kv_heads, heads // kv_heads, dim)
            outs = []
            for (first, end, span), mask in zip(runs, masks):
                scores = torch.matmul(query[first:end], keys[first:end, :, :span].transpose(-1, -2))
                outs.append(torch.matmul(scores.mul_(scale).add_(mask).softmax(dim=-1), values[first:end, :, :span]))
            out = outs[0] if len(outs) == 1 else torch.cat(outs)
            x = x + o_proj(out.reshape(rows, heads * dim))
            hidden = gate_up(mlp_norm(x))
            x = x + down(act(hidden[:, :width]) * hidden[:, width:])
        self.lengths += active.to(self.lengths.dtype)
        return self.head(self.inner.norm(x)).float()


def _common(decoder: Decoder, prefixes: Sequence[Sequence[int]]):
    """The per-layer keys and values [KV, C, D] of the C tokens every prefix starts with (at
    least 16 of them, and one token short of the shortest prefix), encoded once for
    :meth:`Decoder.fill` (vLLM's prefix caching); None when they are fewer. A chat template's
    system prompt is the usual common head of distinct prompts."""
    length = min(len(os.path.commonprefix([list(p) for p in prefixes])), min(len(p) for p in prefixes) - 1)
    if length < 16:
        return None
    decoder.fill([list(prefixes[0])[:length]], [[0]])  # slot 0 is free until the first rows start
    return [k[0, :, :length].clone() for k in decoder.keys], [v[0, :, :length].clone() for v in decoder.values]


@torch.inference_mode()
def sample(model: torch.nn.Module, prefixes: Sequence[Sequence[int]], sources: Sequence[int], *, seeds: Sequence[int],
           batch_size: int, max_new_tokens: int, temperature: float, top_p: float, eos: Sequence[int], pad: int,
           ignore_eos: bool = False, done: Optional[Callable[[int, list[int], list[float]], None]] = None
           ) -> list[tuple[list[int], list[float]]]:
    """:func:`hista.rollout.engine.sample_continuations` for a supported model, by
    continuous batching: at most ``batch_size`` rows decode together, in slots of a
    :class:`Decoder`; rows start in order, and as rows finish, waiting rows take their slots
    (prefilled together once an eighth of the slots is free, or when nothing else runs), each
    distinct prefix of a refill encoded once, and the head all prefixes share (a chat template's
    system prompt) encoded once for the whole call. At each refill the rows running move to the
    first slots longest first and the new rows follow (:meth:`Decoder.move`), so that a step's
    attention reads each run of slots about as far as its rows hold (:meth:`Decoder.chunks`);
    since every running row grows by one token per step, the order holds between refills. Once
    no row waits, finished rows are dropped from the batch as they accumulate. Row r's tokens
    come from its own uniforms (:func:`hista.rollout.sampling.uniforms` of ``seeds[r]``), so they
    do not depend on which rows it decodes beside or in which slot. ``done`` hears of the rows
    finishing at one step in input order."""
    rows = _Slots(model, prefixes, sources, seeds, batch_size, max_new_tokens)
    stop = set(eos)
    rows.start()
    while True:
        busy = [s for s in range(rows.slots) if rows.row_of[s] >= 0]
        if not busy:
            break
        feed, active, finished = rows.advance(busy, temperature, top_p, stop, eos, ignore_eos)
        for row in sorted(finished) if done else ():  # rows finishing together: in input order, whatever their slots
            done(row, *rows.out[row])
        free = [s for s in range(rows.slots) if rows.row_of[s] < 0]
        if any(active):
            if not rows.waiting and len(free) * 8 >= rows.slots:  # no row waits: drop the finished ones
                feed, active = rows.drop_finished(feed, active)
                free = []
            # the next logits of every slot: stale for a free slot until a row starts there
            rows.logits = rows.decoder.step(feed, torch.tensor(active, device=rows.device))
        if rows.waiting and free and (len(free) * 8 >= rows.slots or not any(active)):
            rows.start()
    return rows.out


class _Slots:
    """The rows of one :func:`sample` call and the :class:`Decoder` slots they decode in: the row
    each slot decodes (-1: free), the rows waiting, each row's tokens and log-probs so far, the
    finished rows' completions and the next-token logits of every slot."""

    def __init__(self, model: torch.nn.Module, prefixes: Sequence[Sequence[int]], sources: Sequence[int],
                 seeds: Sequence[int], batch_size: int, max_new_tokens: int):
        self.device = next(model.parameters()).device
        self.prefixes, self.sources, self.seeds, self.max_new_tokens = prefixes, sources, seeds, max_new_tokens
        self.slots = min(batch_size, len(sources))
        self.decoder = Decoder(model, self.slots, max(len(p) for p in prefixes) + max_new_tokens)
        self.row_of = [-1] * self.slots  # the row each slot decodes (-1: free)
        self.waiting = list(range(len(sources)))[::-1]  # rows not started yet, the next one last
        self.tokens: list[list[int]] = [[] for _ in sources]
        self.logps: list[list[float]] = [[] for _ in sources]
        self.out: list[Optional[tuple[list[int], list[float]]]] = [None] * len(sources)
        self.logits = torch.zeros(self.slots, model.config.vocab_size, device=self.device)
        self.common = _common(self.decoder, prefixes) if len(prefixes) > 1 else None

    def start(self) -> None:
        """Refill the free slots with waiting rows: the rows running move to the first slots,
        longest first, and the new rows follow, their prefixes encoded."""
        running = self._keep_longest_first()
        slots_of = self._take_waiting(running)
        self._prefill(slots_of)

    def _keep_longest_first(self) -> int:
        """Move the rows running to the first slots, longest first (each keeps its place when the
        order already holds), so that a run of neighbouring slots holds rows of similar lengths
        (:meth:`Decoder.chunks`); returns how many run."""
        busy = [s for s in range(self.slots) if self.row_of[s] >= 0]
        lengths = self.decoder.lengths.tolist()
        order = sorted(busy, key=lambda s: -lengths[s])
        kept = next((k for k, s in enumerate(order) if s != k), len(order))
        if kept < len(order):
            self.decoder.move(order[kept:], kept)
            self.logits[kept : len(order)] = self.logits[torch.tensor(order[kept:], device=self.device)]
            self.row_of[kept : len(order)] = [self.row_of[s] for s in order[kept:]]
        self.row_of[len(order) :] = [-1] * (self.slots - len(order))
        return len(order)

    def _take_waiting(self, running: int) -> dict[int, list[int]]:
        """Start waiting rows in the slots after the ``running`` ones, in order, the rows of each
        distinct prefix together, longest prefixes first; returns each prefix's slots."""
        rows_of: dict[int, list[int]] = {}  # each distinct prefix of the refill: its rows
        for _ in range(min(self.slots - running, len(self.waiting))):
            row = self.waiting.pop()
            rows_of.setdefault(self.sources[row], []).append(row)
        slots_of: dict[int, list[int]] = {}  # and the slots they take, longest prefixes first
        slot = running
        for p in sorted(rows_of, key=lambda p: -len(self.prefixes[p])):
            slots_of[p] = list(range(slot, slot + len(rows_of[p])))
            self.row_of[slot : slot + len(rows_of[p])] = rows_of[p]
            slot += len(rows_of[p])
        self.decoder.lengths[slot:] = 0  # free slots: no positions to read
        return slots_of

    def _prefill(self, slots_of: dict[int, list[int]]) -> None:
        """Encode each new prefix into its slots, :data:`PREFILL_PREFIXES` at a time, shortest
        first, keeping their next-token logits."""
        used = sorted(slots_of, key=lambda p: len(self.prefixes[p]))
        for first in range(0, len(used), PREFILL_PREFIXES):  # prefixes of similar lengths together: little padding
            part = used[first : first + PREFILL_PREFIXES]
            next_logits = self.decoder.fill([self.prefixes[p] for p in part], [slots_of[p] for p in part], self.common)
            for k, p in enumerate(part):
                self.logits[slots_of[p]] = next_logits[k]

    def advance(self, busy: list[int], temperature: float, top_p: float, stop: set[int], eos: Sequence[int],
                ignore_eos: bool) -> tuple[torch.Tensor, list[bool], list[int]]:
        """Draw the next token of every ``busy`` slot's row from its own uniforms; a row that ends
        (EOS or the cap) keeps its completion and frees its slot. Returns the tokens to feed
        [slots, 1], which slots decode on, and the rows that finished."""
        # every slot's token (a free slot's row of logits is stale and its token unused): cheaper
        # than gathering the busy rows' logits
        chosen, chosen_logp = pick(self.logits, temperature, top_p,
                                   uniforms([self.seeds[r] if r >= 0 else 0 for r in self.row_of],
                                            [len(self.tokens[r]) if r >= 0 else 0 for r in self.row_of], self.device))
        active, ended, finished = [False] * self.slots, [], []
        picked, picked_logp = chosen[:, 0].tolist(), chosen_logp[:, 0].tolist()
        for slot in busy:
            row, t = self.row_of[slot], picked[slot]
            self.tokens[row].append(t)
            self.logps[row].append(picked_logp[slot])
            if len(self.tokens[row]) == self.max_new_tokens or (t in stop and not ignore_eos):
                k = len(self.tokens[row]) if ignore_eos else completion_length(self.tokens[row], eos)
                self.out[row] = (self.tokens[row][:k], self.logps[row][:k])
                self.row_of[slot] = -1
                ended.append(slot)
                finished.append(row)
            else:
                active[slot] = True
        if ended:
            self.decoder.lengths[ended] = 0  # a free slot: no positions to read
        return chosen, active, finished

    def drop_finished(self, feed: torch.Tensor, active: list[bool]) -> tuple[torch.Tensor, list[bool]]:
        """Keep only the slots whose rows run (once no row waits for a slot); returns their tokens
        to feed and which are active."""
        keep = [s for s in range(self.slots) if self.row_of[s] >= 0]
        index = torch.tensor(keep, device=self.device)
        self.decoder.select(index)
        self.row_of, self.slots = [self.row_of[s] for s in keep], len(keep)
        return feed[index], [active[s] for s in keep]
