"""Rollout generation with transformers ``generate`` (SPEC §7), batched and seeded."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

import torch

from ..errors import InputError
from ..models import LoadedModel
from ..types import Rollout
from .offsets import decode_with_offsets

SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the problem step by step, briefly. "
    "Then write the final answer inside \\boxed{}."
)


@dataclass
class SamplingConfig:
    """Sampling settings of a rollout engine (SPEC §7); recorded in every result file.

    ``temperature``: finite, ≥ 0 (0 = greedy); ``top_p``: in (0, 1]; ``max_new_tokens`` and
    ``batch_size``: integers ≥ 1. A value out of range raises an InputError whose field is the
    setting's name (the CLI option ``--temperature``, ``--top-p``, ``--max-new-tokens``,
    ``--batch-size``)."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 128
    batch_size: int = 64
    system_prompt: str = SYSTEM_PROMPT

    def __post_init__(self) -> None:
        def number(name: str) -> float:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise InputError(f"must be a number, got {value!r}", field=name)
            if not math.isfinite(value):
                raise InputError(f"must be a finite number, got {value!r}", field=name)
            return float(value)

        if number("temperature") < 0:
            raise InputError(f"must be >= 0 (0 = greedy), got {self.temperature!r}", field="temperature")
        if not 0.0 < number("top_p") <= 1.0:
            raise InputError(f"must lie in (0, 1], got {self.top_p!r}", field="top_p")
        for name in ("max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise InputError(f"must be an integer >= 1, got {value!r}", field=name)
        if not isinstance(self.system_prompt, str):
            raise InputError(f"must be a string, got {type(self.system_prompt).__name__}", field="system_prompt")

    def to_dict(self) -> dict:
        """The settings as a JSON-ready dict (recorded in result files; SPEC §7)."""
        return asdict(self)


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


class _SampledLogprobs:
    """Logits processor that records log p(sampled token) at the sampling temperature.

    At each step it keeps the step's log-softmax and, at the next step, reads off the token
    that was sampled (now the last input id). Memory O(batch x vocab), not O(steps x vocab).
    """

    def __init__(self, temperature: float):
        self.temperature = max(temperature, 1e-6)
        self.previous: Optional[torch.Tensor] = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._collect(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def _collect(self, tokens: torch.Tensor) -> None:
        if self.previous is not None:
            self.steps.append(self.previous.gather(-1, tokens[:, None]).squeeze(-1).cpu())

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        self._collect(sequences[:, -1])
        self.previous = None
        return torch.stack(self.steps, dim=1) if self.steps else torch.zeros(sequences.shape[0], 0)


class GenerateEngine:
    """transformers-``generate`` rollout engine (CPU or CUDA). ``generate`` returns, for each
    prompt, ``n`` Rollouts with prompt/completion ids, completion text, per-token character
    offsets and old log-probs (SPEC §3, §7). Results are a deterministic function of the
    seed, the prompts, ``n`` and the batch size."""

    def __init__(self, lm: LoadedModel, config: Optional[SamplingConfig] = None):
        self.lm = lm
        self.config = config or SamplingConfig()

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
        eos = _eos_ids(self.lm)
        for b, start in enumerate(range(0, len(rows), cfg.batch_size)):
            chunk = rows[start : start + cfg.batch_size]
            batch_prompts = [prompts[i] for i, _ in chunk]
            width = max(len(p) for p in batch_prompts)
            pad = tok.pad_token_id
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch_prompts])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch_prompts])
            recorder = _SampledLogprobs(cfg.temperature)
            torch.manual_seed(seed * 1_000_003 + b)
            sample = cfg.temperature > 0
            seqs = self.lm.model.generate(
                input_ids=ids.to(self.lm.device),
                attention_mask=mask.to(self.lm.device),
                max_new_tokens=max_new_tokens if max_new_tokens is not None else cfg.max_new_tokens,
                do_sample=sample,
                temperature=cfg.temperature if sample else None,
                top_p=cfg.top_p if sample else None,
                top_k=0 if sample else None,
                pad_token_id=pad,
                eos_token_id=eos,
                logits_processor=[recorder],
            ).cpu()
            logprobs = recorder.finish(seqs)
            for row, (i, _) in enumerate(chunk):
                completion = seqs[row, width:].tolist()
                length = _completion_length(completion, eos)
                completion = completion[:length]
                text, offsets = decode_with_offsets(tok, completion)
                out[i].append(
                    Rollout(
                        prompt_ids=prompts[i],
                        completion_ids=completion,
                        completion_text=text,
                        offsets=offsets,
                        prompt_text=texts[i],
                        logprobs=logprobs[row, :length].tolist(),
                    )
                )
            if progress:
                progress(len(chunk))
        return out


def _eos_ids(lm: LoadedModel) -> list[int]:
    ids = {lm.tokenizer.eos_token_id}
    gen_eos = getattr(getattr(lm.model, "generation_config", None), "eos_token_id", None)
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
