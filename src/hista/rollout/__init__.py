"""Rollout engines (SPEC §7): transformers on CPU or CUDA (``hf``), vLLM on CUDA (``vllm``)."""

from .engine import SYSTEM_PROMPT, GenerateEngine, SamplingConfig, prompt_ids
from .engines import Engine, make_engine
from .offsets import decode_with_offsets

__all__ = ["SYSTEM_PROMPT", "Engine", "GenerateEngine", "SamplingConfig", "decode_with_offsets", "make_engine",
           "prompt_ids"]
