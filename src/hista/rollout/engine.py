"""The transformers rollout engine (SPEC §7): batched, seeded sampling with shared prefixes."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from ..models import LoadedModel
from ..models.forward import cache_argument
from ..models.packed import packed_linears
from ..types import Rollout
from . import llama_decode, prefix_attention
from .config import SYSTEM_PROMPT, SamplingConfig
from .offsets import decode_with_offsets


def chat_messages(problem: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict]:
    """The conversation that poses one problem (SPEC §7): the system prompt, when there is one,
    then the problem as the user's turn. Sampling, SVEB and training all pose problems so."""
    messages = [{"role": "user", "content": problem}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def prompt_ids(lm: LoadedModel, problem: str, system_prompt: str = SYSTEM_PROMPT) -> tuple[str, list[int]]:
    """The chat-templated prompt (text and token ids) for one problem, with the system prompt
    that asks for the final answer in ``\\boxed{}`` (SPEC §7)."""
    tok = lm.tokenizer
    messages = chat_messages(problem, system_prompt)
    if getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:  # base models without a template: plain text prompt
        text = (system_prompt + "\n\n" if system_prompt else "") + problem + "\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return text, list(ids)


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering as transformers' TopPLogitsWarper does it: drop the tokens of lowest
    probability whose cumulative probability stays within ``1 - top_p``, keeping at least one."""
    ordered, order = torch.sort(logits, descending=False, dim=-1)
    remove = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
    remove[..., -1:] = False
    return logits.masked_fill(remove.scatter(1, order, remove), float("-inf"))


def _reserved_cache(config, capacity: int):
    """A transformers ``DynamicCache`` whose full-attention layers write each step's keys and
    values into a buffer reserved for ``capacity`` positions instead of concatenating them onto
    the cache (a concatenation copies the whole cache at every step)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    class ReservedLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start, end = self.get_seq_length(), self.get_seq_length() + key_states.shape[-2]
            if start == 0:
                shape = (*key_states.shape[:2], max(capacity, end), key_states.shape[-1])
                self.k_buffer, self.v_buffer = key_states.new_empty(shape), value_states.new_empty(shape)
            self.k_buffer[:, :, start:end] = key_states
            self.v_buffer[:, :, start:end] = value_states
            self.keys, self.values = self.k_buffer[:, :, :end], self.v_buffer[:, :, :end]
            return self.keys, self.values

        def batch_select_indices(self, indices):
            if self.get_seq_length() > 0:
                end = self.get_seq_length()
                self.k_buffer, self.v_buffer = self.k_buffer[indices], self.v_buffer[indices]
                self.keys, self.values = self.k_buffer[:, :, :end], self.v_buffer[:, :, :end]

    cache = DynamicCache(config=config)
    cache.layers = [ReservedLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


_BLOCK = 256


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``probs`` [B, V] by inverse-CDF sampling in two levels: a uniform
    number per row picks a block of 256 tokens from the rows' cumulative block sums, then the
    token inside the block from that block's cumulative probabilities (both float64, so that
    no probability is lost to rounding). Draws exactly from ``probs`` (a zero-probability token
    is never chosen), like ``torch.multinomial``, at a fraction of its cost on CPU, which draws V
    exponentials per row; the two levels spare a float64 cumulative sum over the vocabulary
    (SPEC §7 sampling)."""
    rows, size = probs.shape
    blocks = -(-size // _BLOCK)
    tiles = probs if size % _BLOCK == 0 else torch.nn.functional.pad(probs, (0, blocks * _BLOCK - size))
    tiles = tiles.reshape(rows, blocks, _BLOCK)
    cdf = tiles.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1)
    u = torch.rand(rows, 1, generator=generator, dtype=torch.float64, device=probs.device) * cdf[:, -1:]
    block = torch.searchsorted(cdf, u, right=True).clamp(max=blocks - 1)
    start = torch.where(block > 0, cdf.gather(1, (block - 1).clamp(min=0)), 0.0)
    inside = tiles.gather(1, block[:, :, None].expand(-1, -1, _BLOCK))[:, 0]
    token = torch.searchsorted(start + inside.double().cumsum(dim=-1), u, right=True)
    if bool((token >= _BLOCK).any()):  # rounding put u past the block's sum: its last token of positive probability
        last = _BLOCK - 1 - (inside.flip(-1) > 0).to(torch.uint8).argmax(dim=-1, keepdim=True)
        token = torch.where(token >= _BLOCK, last, token)
    return block * _BLOCK + token


@torch.inference_mode()
def sample_continuations(model, prefixes: Sequence[Sequence[int]], sources: Sequence[int], *, max_new_tokens: int,
                         temperature: float, top_p: float, eos: Sequence[int], pad: int,
                         generator: torch.Generator, ignore_eos: bool = False) -> list[tuple[list[int], list[float]]]:
    """Sample one completion per row, row r continuing ``prefixes[sources[r]]`` (SPEC §7).

    Each distinct prefix is encoded once (left-padded, logits at its last position only), the
    prefix caching of vLLM. Each step then feeds one token per unfinished row; a row stops
    after an EOS token, and finished rows are dropped from the batch (and the cache) as they
    accumulate. When the rows of each prefix are contiguous and the model's layers all use
    full attention, the prefix's keys and values stay one copy that its rows' decode steps read
    once (:mod:`hista.rollout.prefix_attention`); otherwise they are copied to every row. Those
    shared-prefix steps run without transformers' module stack where
    :mod:`hista.rollout.llama_decode` supports the model (Llama-family layers on CPU). Linear
    layers run on oneDNN's packed weights on CPU (:mod:`hista.models.packed`). Sampling is
    transformers' ``do_sample`` with ``temperature``, ``top_p`` and no top-k (greedy when
    ``temperature`` is 0), drawn from ``generator``. Returns per row the completion ids (up to
    and including the EOS) and log p(token) under softmax(logits / temperature) before top-p,
    the old-policy log-probs of SPEC §3."""
    with packed_linears(model):
        device = next(model.parameters()).device
        width = max(len(p) for p in prefixes)
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prefixes], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prefixes], device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        shared = list(sources) == sorted(sources) and prefix_attention.supported(model)
        fast = shared and llama_decode.supported(model)
        if shared:
            from transformers import DynamicCache

            cache = DynamicCache(config=model.config)
        else:
            cache = _reserved_cache(model.config, width + max_new_tokens)
        cache_arg = cache_argument(model)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                       **{cache_arg: cache}).logits[:, -1].float()
        rows = torch.tensor(list(sources), device=device)
        logits, position = logits[rows], positions[rows, -1:] + 1
        if shared:
            prefix = prefix_attention.SharedPrefix([layer.keys for layer in cache.layers],
                                                   [layer.values for layer in cache.layers],
                                                   [len(p) for p in prefixes], list(sources))
            cache = llama_decode.Decoder(model, len(rows), max_new_tokens) if fast else _reserved_cache(
                model.config, max_new_tokens)
        else:
            prefix = None
            cache.batch_select_indices(rows)
            mask = mask[rows]
        alive = list(range(len(rows)))  # original row of each batch row
        tokens: list[list[int]] = [[] for _ in alive]
        logps: list[list[float]] = [[] for _ in alive]
        stop = torch.tensor(sorted(set(eos)) or [-1], device=device)
        finished = torch.zeros(len(alive), dtype=torch.bool, device=device)
        scale = max(temperature, 1e-6)
        for step in range(max_new_tokens):
            logits = logits.div_(scale)
            logp = torch.log_softmax(logits, dim=-1)
            if temperature > 0:
                chosen = draw(logp.exp() if top_p >= 1.0 else _top_p_filter(logits, top_p).softmax(dim=-1), generator)
            else:
                chosen = logits.argmax(dim=-1, keepdim=True)
            chosen_logp = logp.gather(-1, chosen)
            for k, (t, lp) in enumerate(zip(chosen[:, 0].tolist(), chosen_logp[:, 0].tolist())):
                tokens[alive[k]].append(t)
                logps[alive[k]].append(lp)
            if step == max_new_tokens - 1:
                break
            if not ignore_eos:
                finished |= torch.isin(chosen[:, 0], stop)
            done = int(finished.sum())
            if done == len(alive):
                break
            if done and done * 8 >= len(alive):  # drop finished rows once they are an eighth of the batch
                index = (~finished).nonzero()[:, 0]
                cache.batch_select_indices(index)
                chosen, position, finished = chosen[index], position[index], finished[index]
                alive = [alive[k] for k in index.tolist()]
                if prefix is None:
                    mask = mask[index]
                else:
                    prefix.select(index.tolist())
            if prefix is None:
                mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=1)
                logits = model(input_ids=chosen, attention_mask=mask, position_ids=position, use_cache=True,
                               logits_to_keep=1, **{cache_arg: cache}).logits[:, -1].float()
            elif fast:
                logits = cache.step(chosen, position, prefix)
            else:
                logits = prefix_attention.decode_step(model, chosen, position, cache, cache_arg, prefix)
            position = position + 1
    out = []
    for row_tokens, row_logps in zip(tokens, logps):
        length = len(row_tokens) if ignore_eos else _completion_length(row_tokens, eos)
        out.append((row_tokens[:length], row_logps[:length]))
    return out


class GenerateEngine:
    """The rollout engine (CPU or CUDA; SPEC §7): transformers models driven by
    :func:`sample_continuations`, which encodes each distinct prompt once. ``generate`` returns, for each
    prompt, ``n`` Rollouts with prompt/completion ids, completion text, per-token character
    offsets and old log-probs (SPEC §3, §7). Results are a deterministic function of the
    seed, the prompts, ``n`` and the batch size."""

    name = "hf"

    def __init__(self, lm: LoadedModel, config: Optional[SamplingConfig] = None):
        self.lm = lm
        self.config = config or SamplingConfig()

    def identity(self) -> dict:
        """Which engine samples, for result files (SPEC §7): name and the transformers and torch
        versions; builds and evaluations refuse to mix identities."""
        import transformers

        return {"name": self.name, "transformers": transformers.__version__, "torch": torch.__version__}

    def with_config(self, config: SamplingConfig) -> "GenerateEngine":
        """This engine's model with other sampling settings (SPEC §7)."""
        return GenerateEngine(self.lm, config)

    def generate(
        self,
        problems: Sequence[str],
        n: int,
        *,
        seed: int = 0,
        progress: Optional[Callable[[int], None]] = None,
    ) -> list[list[Rollout]]:
        """Sample ``n`` completions for each problem text (chat template + system prompt).
        ``progress(k)`` is called after each micro-batch with the number of sequences done."""
        prompts = [prompt_ids(self.lm, p, self.config.system_prompt) for p in problems]
        return self.generate_from_ids([ids for _, ids in prompts], n, seed=seed, progress=progress,
                                      prompt_texts=[text for text, _ in prompts])

    @torch.no_grad()
    def generate_from_ids(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        *,
        seed: int = 0,
        progress: Optional[Callable[[int], None]] = None,
        prompt_texts: Optional[Sequence[str]] = None,
        max_new_tokens: Optional[int] = None,
    ) -> list[list[Rollout]]:
        """Sample ``n`` continuations of each token-id prompt (e.g. a prompt plus a partial
        completion, for Monte-Carlo continuations). ``max_new_tokens`` overrides the config."""
        cfg, tok = self.config, self.lm.tokenizer
        prompts = [list(p) for p in prompts]
        texts = list(prompt_texts) if prompt_texts is not None else [""] * len(prompts)
        rows = [(i, j) for i in range(len(prompts)) for j in range(n)]
        out: list[list[Rollout]] = [[] for _ in prompts]
        eos = eos_ids(self.lm)
        with packed_linears(self.lm.model):  # packed once for all micro-batches
            for b, start in enumerate(range(0, len(rows), cfg.batch_size)):
                chunk = rows[start : start + cfg.batch_size]
                distinct = sorted({i for i, _ in chunk})
                generator = torch.Generator(device=self.lm.device).manual_seed(seed * 1_000_003 + b)
                samples = sample_continuations(
                    self.lm.model, [prompts[i] for i in distinct], [distinct.index(i) for i, _ in chunk],
                    max_new_tokens=max_new_tokens if max_new_tokens is not None else cfg.max_new_tokens,
                    temperature=cfg.temperature, top_p=cfg.top_p, eos=eos, pad=tok.pad_token_id, generator=generator)
                for (i, _), (completion, logprobs) in zip(chunk, samples):
                    text, offsets = decode_with_offsets(tok, completion)
                    out[i].append(Rollout(prompt_ids=prompts[i], completion_ids=completion, completion_text=text,
                                          offsets=offsets, prompt_text=texts[i], logprobs=logprobs))
                if progress:
                    progress(len(chunk))
        return out


def eos_ids(lm: LoadedModel) -> list[int]:
    """The token ids that end a completion (SPEC §7): the tokenizer's EOS and those of the
    model's generation config (read without the weights for the vllm engine), sorted."""
    ids = {lm.tokenizer.eos_token_id}
    generation = lm.generation_config if lm.model is None else getattr(lm.model, "generation_config", None)
    gen_eos = getattr(generation, "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(gen_eos)
    return sorted(i for i in ids if i is not None)


def _completion_length(tokens: list[int], eos: list[int]) -> int:
    """Tokens up to and including the first EOS (later positions are padding)."""
    for k, t in enumerate(tokens):
        if t in eos:
            return k + 1
    return len(tokens)
