"""Choosing a rollout engine by name: ``hf`` (transformers, CPU or CUDA, the default)
or ``vllm`` (vLLM, CUDA), and what a result file records of it."""

from __future__ import annotations

from typing import Callable, Optional, Protocol, Sequence

from ..models import LoadedModel, load
from ..types import Rollout
from .config import SamplingConfig, check_engine
from .engine import GenerateEngine


class Engine(Protocol):
    """What every rollout engine provides: its ``name``, the model ``lm`` (tokenizer,
    name, revision), the sampling ``config``, its ``identity()`` for result files,
    ``with_config(config)`` (the same engine and model with other settings), and
    ``generate`` / ``generate_from_ids`` returning, per prompt, ``n`` Rollouts with token ids,
    text, offsets and old log-probs."""

    name: str
    lm: LoadedModel
    config: SamplingConfig

    def identity(self) -> dict: ...

    def with_config(self, config: SamplingConfig) -> "Engine": ...

    def generate(self, problems: Sequence[str], n: int, *, seed: int = 0,
                 progress: Optional[Callable[[int], None]] = None) -> list[list[Rollout]]: ...

    def generate_from_ids(self, prompts: Sequence[Sequence[int]], n: int, *, seed: int = 0,
                          progress: Optional[Callable[[int], None]] = None,
                          prompt_texts: Optional[Sequence[str]] = None,
                          max_new_tokens: Optional[int] = None) -> list[list[Rollout]]: ...


def available_engines() -> list[str]:
    """The engines this environment can run: ``hf`` always, ``vllm`` where the vllm
    package imports and a CUDA GPU is visible."""
    from .vllm_engine import check_available

    try:
        check_available()
    except Exception:  # noqa: BLE001 - not installed, not importable with this torch, or no GPU
        return ["hf"]
    return ["hf", "vllm"]


def load_model(engine: str, model: str, *, device: Optional[str] = None) -> LoadedModel:
    """The model an engine samples from: with ``hf`` the model on ``device``; with
    ``vllm`` only its tokenizer and revision (vLLM loads the weights itself), checking first that
    vLLM and a GPU are there so that a missing one fails before anything loads."""
    check_engine(engine)
    if engine == "vllm":
        from .vllm_engine import check_available

        check_available()
        return load(model, weights=False)
    return load(model, device=device)


def make_engine(engine: str, lm: LoadedModel, config: SamplingConfig, *, tensor_parallel_size: int = 1) -> Engine:
    """An engine named ``engine`` on ``lm`` with ``config``: a
    :class:`~hista.rollout.GenerateEngine` or a :class:`~hista.rollout.vllm_engine.VLLMEngine`."""
    check_engine(engine, tensor_parallel_size)
    if engine == "vllm":
        from .vllm_engine import VLLMEngine

        return VLLMEngine(lm, config, tensor_parallel_size=tensor_parallel_size)
    return GenerateEngine(lm, config)

