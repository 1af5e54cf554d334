"""Rollout engines: transformers on CPU or CUDA (``hf``), vLLM on CUDA (``vllm``).

The names below load their module on first use (PEP 562), so that reading the settings of
:mod:`hista.rollout.config` (as ``hista --help`` does) imports no torch."""

from importlib import import_module
from typing import Any

from .config import ENGINES, SYSTEM_PROMPT, SamplingConfig, check_engine

_LAZY = {"GenerateEngine": ".engine", "prompt_ids": ".engine", "Engine": ".engines", "make_engine": ".engines",
         "decode_with_offsets": ".offsets"}

__all__ = ["ENGINES", "SYSTEM_PROMPT", "Engine", "GenerateEngine", "SamplingConfig", "check_engine",
           "decode_with_offsets", "make_engine", "prompt_ids"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
