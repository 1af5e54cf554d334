"""Models: loading by alias / path / hub id, and the batched forward pass."""

from .forward import ForwardOutput, forward, hidden_states
from .loading import ALIASES, EMBEDDED, LoadedModel, cache_dir, check_device, check_weights, load, prepare_embedded

__all__ = ["ALIASES", "EMBEDDED", "ForwardOutput", "LoadedModel", "cache_dir", "check_device", "check_weights",
           "forward", "hidden_states", "load", "prepare_embedded"]
