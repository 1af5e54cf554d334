"""Rollout engines (SPEC §7): transformers ``generate`` on CPU or CUDA."""

from .engine import SYSTEM_PROMPT, GenerateEngine, SamplingConfig, prompt_ids
from .offsets import decode_with_offsets

__all__ = ["SYSTEM_PROMPT", "GenerateEngine", "SamplingConfig", "decode_with_offsets", "prompt_ids"]
