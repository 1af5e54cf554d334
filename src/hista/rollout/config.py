"""Rollout settings: the sampling configuration every engine takes, the engines by
name and the default system prompt. Plain values, no model and no torch: the command line
reads its defaults from here."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence

from ..errors import InputError
from ..sharding import derive_seed

#: The rollout engines by name: transformers (CPU or CUDA) and vLLM (CUDA).
ENGINES = ("hf", "vllm")

SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the problem step by step, briefly. "
    "Then write the final answer inside \\boxed{}."
)


@dataclass
class SamplingConfig:
    """Sampling settings of a rollout engine; recorded in every result file.

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
        """The settings as a JSON-ready dict (recorded in result files)."""
        return asdict(self)


def check_engine(name: Any, tensor_parallel_size: Any = 1) -> None:
    """An InputError (field ``engine`` or ``tensor_parallel_size``) unless ``name`` is one of
    :data:`ENGINES` and ``tensor_parallel_size`` an integer >= 1, above 1 only for vllm."""
    if name not in ENGINES:
        raise InputError(f"unknown engine {name!r}; valid: {', '.join(ENGINES)}", field="engine")
    tp = tensor_parallel_size
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InputError(f"must be an integer >= 1, got {tp!r}", field="tensor_parallel_size")
    if tp > 1 and name != "vllm":
        raise InputError(f"is {tp}, but tensor parallelism is a vllm engine option (--engine vllm)",
                         field="tensor_parallel_size")


def sample_seeds(count: int, n: int, seed: int = 0, prompt_seeds: Optional[Sequence[int]] = None) -> list[int]:
    """The seed of every sample of a call, prompt-major: sample j of prompt i is seeded
    by the prompt's seed and j alone, the prompt's seed being ``prompt_seeds[i]`` when given (a
    caller that names its prompts, as ``hista eval`` does by problem id) or the call's ``seed``
    and i. So a sample depends on neither its batch, nor the other prompts of the call, nor what
    finished before it; every engine seeds so."""
    if prompt_seeds is not None and len(prompt_seeds) != count:
        raise ValueError(f"{len(prompt_seeds)} prompt seeds for {count} prompts")
    bases = list(prompt_seeds) if prompt_seeds is not None else [derive_seed(seed, i) for i in range(count)]
    return [derive_seed(base, j) for base in bases for j in range(n)]
