"""The transformers rollout engine: batched, seeded sampling with shared prefixes."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional, Sequence

import torch

from ..errors import InputError
from ..models import LoadedModel
from ..models.forward import cache_argument
from ..models.packed import packed_linears
from ..types import Rollout
from . import heap, llama_decode, prefix_attention
from .config import SYSTEM_PROMPT, SamplingConfig, sample_seeds
from .offsets import decode_with_offsets
from .sampling import completion_length, pick, uniforms


def chat_messages(problem: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict]:
    """The conversation that poses one problem: the system prompt, when there is one,
    then the problem as the user's turn. Sampling, SVEB and training all pose problems so."""
    messages = [{"role": "user", "content": problem}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def prompt_ids(lm: LoadedModel, problem: str, system_prompt: str = SYSTEM_PROMPT) -> tuple[str, list[int]]:
    """The chat-templated prompt (text and token ids) for one problem, with the system prompt
    that asks for the final answer in ``\\boxed{}``."""
    tok = lm.tokenizer
    messages = chat_messages(problem, system_prompt)
    if getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:  # base models without a template: plain text prompt
        text = (system_prompt + "\n\n" if system_prompt else "") + problem + "\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return text, list(ids)


def check_context(lm: LoadedModel, max_new_tokens: int, prompts: Mapping[str, int] | None = None) -> None:
    """Refuse a sampling whose rows cannot fit the model's context, before anything is
    sampled: the engine reserves a cache of prompt + ``max_new_tokens`` positions per row, and a
    model attends over ``lm.context`` positions at most. An InputError about ``max_new_tokens``
    (the option ``--max-new-tokens``) when the cap alone passes the context, else naming the
    first of ``prompts`` (name -> prompt tokens, e.g. a problem's key) whose tokens plus the cap
    pass it, with its token count. Nothing is checked when the context is unknown
    (``lm.context`` is None: the vllm engine checks its own ``max_model_len``)."""
    context = lm.context
    if context is None:
        return
    if max_new_tokens > context:
        raise InputError(f"{max_new_tokens} new tokens (--max-new-tokens) do not fit the context of {lm.name}: "
                         f"{context} positions (max_position_embeddings) for the prompt and the completion together; "
                         f"give at most {context} minus the prompt's tokens", field="max_new_tokens")
    for name, tokens in (prompts or {}).items():
        if tokens + max_new_tokens > context:
            raise InputError(f"problem {name!r} has a prompt of {tokens} tokens, which with {max_new_tokens} new "
                             f"tokens (--max-new-tokens) passes the context of {lm.name}: {context} positions "
                             "(max_position_embeddings); shorten the problem, leave it out, or lower --max-new-tokens")


def check_prompts(lm: LoadedModel, max_new_tokens: int, problems: Iterable[tuple[str, str]],
                  system_prompt: str = SYSTEM_PROMPT) -> None:
    """Refuse, before anything is sampled or written, problems that cannot be sampled within the
    model's context: each ``(name, problem text)`` is posed as the engine poses it
    (:func:`prompt_ids`, chat template and ``system_prompt``) and :func:`check_context` refuses
    the cap alone, or the first problem whose prompt's tokens plus ``max_new_tokens`` pass
    ``lm.context``, naming it (e.g. ``SPEC/ID``) and its token count. A prompt is never
    truncated. Nothing is posed when the context is unknown (the vllm engine). Shared by
    ``hista eval``, ``sample``, ``tasks filter`` and ``sveb build``."""
    check_context(lm, max_new_tokens)
    if lm.context is None:
        return
    for name, problem in problems:
        check_context(lm, max_new_tokens, {name: len(prompt_ids(lm, problem, system_prompt)[1])})


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


@torch.inference_mode()
def sample_continuations(model, prefixes: Sequence[Sequence[int]], sources: Sequence[int], *, max_new_tokens: int,
                         temperature: float, top_p: float, eos: Sequence[int], pad: int, seeds: Sequence[int],
                         batch_size: Optional[int] = None, ignore_eos: bool = False,
                         done: Optional[Callable[[int, list[int], list[float]], None]] = None
                         ) -> list[tuple[list[int], list[float]]]:
    """Sample one completion per row, row r continuing ``prefixes[sources[r]]`` with the seed
    ``seeds[r]``, at most ``batch_size`` rows at a time (all at once when None).

    A row stops after an EOS token (unless ``ignore_eos``) or ``max_new_tokens`` tokens;
    ``done(r, tokens, logprobs)`` is called as row r finishes. Row r's tokens depend on its
    prefix, its seed and the model only (:func:`uniforms`): not on its batch or on what finished
    before it, up to the float rounding of batched products. Linear layers run on oneDNN's packed weights on CPU
    (:mod:`hista.models.packed`). Llama-family models on CPU decode by continuous batching
    (:func:`hista.rollout.llama_decode.sample`: finished rows are replaced by waiting ones at
    once); other models in batches of ``batch_size`` rows through transformers' module stack,
    each distinct prefix encoded once and, when the rows of each prefix are contiguous, read
    once by its rows' decode steps (:mod:`hista.rollout.prefix_attention`). Returns per row
    the completion ids (up to and including the EOS) and their log-probs (:func:`pick`). On CPU
    the process keeps freed memory for reuse (:func:`hista.rollout.heap.keep_freed_memory`)."""
    options = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, eos=eos, pad=pad,
                   ignore_eos=ignore_eos)
    size = batch_size or len(sources)
    if next(model.parameters()).device.type == "cpu":
        heap.keep_freed_memory()
    with packed_linears(model):
        if llama_decode.supported(model):
            return llama_decode.sample(model, prefixes, sources, seeds=seeds, batch_size=size, done=done, **options)
        out = []
        for start in range(0, len(sources), size):
            rows = list(sources[start : start + size])
            used = sorted(set(rows))
            out += _sample_batch(model, [prefixes[i] for i in used], [used.index(i) for i in rows],
                                 seeds[start : start + size], **options)
            for r in range(start, start + len(rows)):
                if done:
                    done(r, *out[r])
    return out


def _sample_batch(model, prefixes: Sequence[Sequence[int]], sources: Sequence[int], seeds: Sequence[int], *,
                  max_new_tokens: int, temperature: float, top_p: float, eos: Sequence[int], pad: int,
                  ignore_eos: bool) -> list[tuple[list[int], list[float]]]:
    """One batch of :func:`sample_continuations` through the module stack: each distinct prefix
    encoded once (left-padded, logits at its last position only), then one token per unfinished
    row per step, finished rows dropped from the batch (and the cache) as they accumulate."""
    device = next(model.parameters()).device
    batch = _prefill(model, prefixes, sources, max_new_tokens, pad)
    tokens: list[list[int]] = [[] for _ in batch.alive]
    logps: list[list[float]] = [[] for _ in batch.alive]
    stop = torch.tensor(sorted(set(eos)) or [-1], device=device)
    finished = torch.zeros(len(batch.alive), dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        chosen, chosen_logp = pick(batch.logits, temperature, top_p,
                                   uniforms([seeds[r] for r in batch.alive], [step] * len(batch.alive), device))
        for k, (t, lp) in enumerate(zip(chosen[:, 0].tolist(), chosen_logp[:, 0].tolist())):
            tokens[batch.alive[k]].append(t)
            logps[batch.alive[k]].append(lp)
        if step == max_new_tokens - 1:
            break
        if not ignore_eos:
            finished |= torch.isin(chosen[:, 0], stop)
        done = int(finished.sum())
        if done == len(batch.alive):
            break
        if done and done * 8 >= len(batch.alive):  # drop finished rows once they are an eighth of the batch
            index = (~finished).nonzero()[:, 0]
            batch.select(index)
            chosen, finished = chosen[index], finished[index]
        batch.step(model, chosen)
    lengths = [len(row) if ignore_eos else completion_length(row, eos) for row in tokens]
    return [(row[:k], row_logps[:k]) for row, row_logps, k in zip(tokens, logps, lengths)]


class _Batch:
    """The rows of one :func:`_sample_batch` as they decode: the next-token logits and position of
    each, their cache (and the prefixes they share, or their attention mask when they share
    none), and the original row of each batch row."""

    def __init__(self, logits: torch.Tensor, position: torch.Tensor, mask: torch.Tensor, cache, cache_arg: str,
                 prefix: Optional[prefix_attention.SharedPrefix], alive: list[int]):
        self.logits, self.position, self.mask, self.cache, self.cache_arg = logits, position, mask, cache, cache_arg
        self.prefix, self.alive = prefix, alive

    def select(self, index: torch.Tensor) -> None:
        """Keep the batch rows ``index`` (in order), in the cache too."""
        self.cache.batch_select_indices(index)
        self.position = self.position[index]
        self.alive = [self.alive[k] for k in index.tolist()]
        if self.prefix is None:
            self.mask = self.mask[index]
        else:
            self.prefix.select(index.tolist())

    def step(self, model, chosen: torch.Tensor) -> None:
        """Feed the ``chosen`` tokens [B, 1]: the next logits of every row, one position on."""
        if self.prefix is None:
            self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.alive), 1)], dim=1)
            self.logits = model(input_ids=chosen, attention_mask=self.mask, position_ids=self.position,
                                use_cache=True, logits_to_keep=1,
                                **{self.cache_arg: self.cache}).logits[:, -1].float()
        else:
            self.logits = prefix_attention.decode_step(model, chosen, self.position, self.cache, self.cache_arg,
                                                       self.prefix)
        self.position = self.position + 1


def _prefill(model, prefixes: Sequence[Sequence[int]], sources: Sequence[int], max_new_tokens: int,
             pad: int) -> _Batch:
    """Encode each distinct prefix once (left-padded, logits at its last position only) and
    give each row its prefix's logits and cache: the encoded prefixes read once by the rows
    of each (:mod:`hista.rollout.prefix_attention`) when the rows of a prefix are contiguous,
    else a copy per row."""
    device = next(model.parameters()).device
    width = max(len(p) for p in prefixes)
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prefixes], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prefixes], device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    shared = list(sources) == sorted(sources) and prefix_attention.supported(model)
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
        cache = _reserved_cache(model.config, max_new_tokens)
    else:
        prefix = None
        cache.batch_select_indices(rows)
        mask = mask[rows]
    return _Batch(logits, position, mask, cache, cache_arg, prefix, list(range(len(rows))))


class PosesProblems:
    """``generate`` for an engine that has ``generate_from_ids``: problem texts posed
    with the chat template and the config's system prompt, then sampled as token ids."""

    def generate(self, problems: Sequence[str], n: int, *, seed: int = 0,
                 prompt_seeds: Optional[Sequence[int]] = None, progress: Optional[Callable[[int], None]] = None,
                 on_group: Optional[Callable[[int, list[Rollout]], None]] = None) -> list[list[Rollout]]:
        """Sample ``n`` completions for each problem text (chat template + system prompt; SPEC
        §7); the arguments as the engine's ``generate_from_ids``'."""
        prompts = [prompt_ids(self.lm, p, self.config.system_prompt) for p in problems]
        return self.generate_from_ids([ids for _, ids in prompts], n, seed=seed, prompt_seeds=prompt_seeds,
                                      progress=progress, on_group=on_group, prompt_texts=[text for text, _ in prompts])


class GenerateEngine(PosesProblems):
    """The rollout engine (CPU or CUDA): transformers models driven by
    :func:`sample_continuations`. ``generate`` returns, for each prompt, ``n`` Rollouts with
    prompt/completion ids, completion text, per-token character offsets and old log-probs
    (SPEC §3). Sample j of prompt i is a function of the model, the prompt and its seed
    (:func:`hista.rollout.config.sample_seeds`) alone, up to float rounding: the batch size,
    the other prompts of the call and the order in which rows finish do not choose it. A
    ``max_new_tokens`` beyond the model's context is refused when the engine is made
    (:func:`check_context`)."""

    name = "hf"

    def __init__(self, lm: LoadedModel, config: Optional[SamplingConfig] = None):
        self.lm = lm
        self.config = config or SamplingConfig()
        check_context(lm, self.config.max_new_tokens)

    def identity(self) -> dict:
        """Which engine samples, for result files: name and the transformers and torch
        versions; builds and evaluations refuse to mix identities."""
        import transformers

        return {"name": self.name, "transformers": transformers.__version__, "torch": torch.__version__}

    def with_config(self, config: SamplingConfig) -> "GenerateEngine":
        """This engine's model with other sampling settings."""
        return GenerateEngine(self.lm, config)

    @torch.no_grad()
    def generate_from_ids(self, prompts: Sequence[Sequence[int]], n: int, *, seed: int = 0,
                          prompt_seeds: Optional[Sequence[int]] = None,
                          progress: Optional[Callable[[int], None]] = None,
                          on_group: Optional[Callable[[int, list[Rollout]], None]] = None,
                          prompt_texts: Optional[Sequence[str]] = None,
                          max_new_tokens: Optional[int] = None) -> list[list[Rollout]]:
        """Sample ``n`` continuations of each token-id prompt (e.g. a prompt plus a partial
        completion, for Monte-Carlo continuations), ``batch_size`` rows at a time,
        seeded by ``seed`` or, per prompt, by ``prompt_seeds``
        (:func:`hista.rollout.config.sample_seeds`). ``progress(k)`` is called as k more samples
        finish, ``on_group(i, rollouts)`` once prompt i's n samples have. ``max_new_tokens``
        overrides the config."""
        cfg, tok = self.config, self.lm.tokenizer
        prompts = [list(p) for p in prompts]
        texts = list(prompt_texts) if prompt_texts is not None else [""] * len(prompts)
        seeds = sample_seeds(len(prompts), n, seed, prompt_seeds)
        out: list[list[Optional[Rollout]]] = [[None] * n for _ in prompts]
        left = [n] * len(prompts)

        def finished(row: int, completion: list[int], logprobs: list[float]) -> None:
            i, j = divmod(row, n)
            text, offsets = decode_with_offsets(tok, completion)
            out[i][j] = Rollout(prompt_ids=prompts[i], completion_ids=completion, completion_text=text,
                                offsets=offsets, prompt_text=texts[i], logprobs=logprobs)
            if progress:
                progress(1)
            left[i] -= 1
            if not left[i] and on_group:
                on_group(i, out[i])

        sample_continuations(self.lm.model, prompts, [i for i in range(len(prompts)) for _ in range(n)],
                             max_new_tokens=max_new_tokens if max_new_tokens is not None else cfg.max_new_tokens,
                             temperature=cfg.temperature, top_p=cfg.top_p, eos=eos_ids(self.lm),
                             pad=tok.pad_token_id, seeds=seeds, batch_size=cfg.batch_size, done=finished)
        return out


def eos_ids(lm: LoadedModel) -> list[int]:
    """The token ids that end a completion: the tokenizer's EOS and those of the
    model's generation config (read without the weights for the vllm engine), sorted."""
    ids = {lm.tokenizer.eos_token_id}
    generation = lm.generation_config if lm.model is None else getattr(lm.model, "generation_config", None)
    gen_eos = getattr(generation, "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(gen_eos)
    return sorted(i for i in ids if i is not None)
