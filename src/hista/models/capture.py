"""Capture hidden states and entropies from a model's own log-prob pass.

TRL computes the old-policy log-probs with ``model(..., labels=..., fused_lm_head=True)`` under
``torch.no_grad()``. Hista needs one layer's hidden states of exactly that pass and S-trace the
old policy's entropies; hooks collect both, so no extra model call is made.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from .forward import decoder_layers


@dataclass
class PassRecord:
    """What the hooks saw during the log-prob passes inside the ``with`` block: the number of
    passes and, per pass, the hidden states of the requested layer [b, L, H] (when a layer was
    requested) and the per-token entropy (or None)."""

    calls: int = 0
    hidden: list[torch.Tensor] = field(default_factory=list)
    entropy: list[Optional[torch.Tensor]] = field(default_factory=list)

    def rows(self, n: int) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The first ``n`` rows of hidden states and entropies (a later pass through the same
        model, such as a PEFT reference pass, is ignored); None for what was not recorded."""
        hidden = torch.cat(self.hidden, dim=0)[:n] if self.hidden else None
        entropy = None
        if self.entropy and all(e is not None for e in self.entropy):
            entropy = torch.cat(self.entropy, dim=0)[:n]
        return hidden, entropy


def backbone_of(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder of a causal LM ``model`` (its ``model`` or PEFT ``base_model``), through DDP,
    DeepSpeed and FSDP1 wrappers (``module``): where :func:`hook_layer` finds the layers."""
    inner = getattr(model, "module", model)  # DDP / DeepSpeed wrappers
    base = getattr(inner, "base_model", None)
    if base is None or base is inner:
        base = getattr(inner, "model", None)
    if base is None:
        raise ValueError(f"cannot find the decoder of {type(inner).__name__} to capture hidden states from")
    return base


def decoder_stack(backbone: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    """The backbone's stack of decoder layers and its name (``layers`` for Llama / Qwen /
    Mistral, ``h`` for GPT-2): the ModuleList of ``num_hidden_layers`` blocks of its text config
    (SPEC §4.5), whose number is :func:`hista.models.forward.decoder_layers`."""
    count = decoder_layers(backbone)
    for name, module in backbone.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return name, module
    raise ValueError(f"cannot find the {count} decoder layers of {type(backbone).__name__}")


def hook_layer(backbone: torch.nn.Module, layer: int, grab: Callable[[torch.Tensor], None]) -> list:
    """A hook that hands ``hidden_states[layer]`` (transformers' convention: entry 0 is the input
    of the first decoder layer, entry k the output of layer k − 1, the last entry the output
    after the final norm) to ``grab`` on every forward call; returns the hook handles."""

    def first(tensor_or_tuple):
        return tensor_or_tuple[0] if isinstance(tensor_or_tuple, (tuple, list)) else tensor_or_tuple

    def normed(module, args, output):
        grab(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    if layer == -1:
        return [backbone.register_forward_hook(normed)]
    try:
        layers = decoder_stack(backbone)[1]
    except ValueError as exc:
        raise ValueError(f"{exc}; only layer=-1 can be captured") from None
    count = len(layers) + 1
    if not -count <= layer < count:
        raise ValueError(f"layer {layer} is out of range: {type(backbone).__name__} has {count} hidden states "
                         f"(layers {-count}..{count - 1})")
    k = layer % count
    if k == count - 1:
        return [backbone.register_forward_hook(normed)]
    if k == 0:
        return [layers[0].register_forward_pre_hook(
            lambda m, args, kwargs: grab(args[0] if args else kwargs["hidden_states"]), with_kwargs=True)]
    return [layers[k - 1].register_forward_hook(lambda m, args, output: grab(first(output)))]


@contextmanager
def capture_logprob_pass(model: torch.nn.Module, layer: Optional[int] = -1) -> Iterator[PassRecord]:
    """Record ``hidden_states[layer]`` (−1: the last, after the final norm; None: no hidden
    states) and the entropies of every no-grad ``fused_lm_head=True`` call of ``model`` (TRL's
    log-prob pass) made inside the block; generation calls and gradient passes are not recorded."""
    record = PassRecord()
    inner = getattr(model, "module", model)
    state = {"on": False, "hidden": None}

    def before(module, args, kwargs):
        state["on"] = bool(kwargs.get("fused_lm_head")) and not torch.is_grad_enabled()
        state["hidden"] = None

    def grab(hidden: torch.Tensor) -> None:
        if state["on"]:
            state["hidden"] = hidden

    def after(module, args, kwargs, output):
        if state["on"]:
            record.calls += 1
            if layer is not None:
                record.hidden.append(state["hidden"].detach())
            entropy = getattr(output, "entropy", None)
            record.entropy.append(None if entropy is None else entropy.detach())
        state["on"], state["hidden"] = False, None

    handles = [inner.register_forward_pre_hook(before, with_kwargs=True)]
    if layer is not None:
        handles += hook_layer(backbone_of(model), layer, grab)
    handles.append(inner.register_forward_hook(after, with_kwargs=True))
    try:
        yield record
    finally:
        for h in handles:
            h.remove()
