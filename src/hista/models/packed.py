"""Inference on CPU with the linear layers' weights reordered once for oneDNN.

PyTorch multiplies a float32 ``nn.Linear`` on the CPU with the BLAS it was built with (MKL),
which on the machines hista is measured on is 1.3x (prefill) to 1.7x (a decode step at batch
16) slower than oneDNN with a weight reordered ahead of time into oneDNN's blocked layout, the
layout PyTorch's own inductor uses for frozen CPU models (``mkldnn._linear_pointwise``).
Both compute the same float32 product; results differ by float rounding only.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Callable, Iterator

import torch

_ACTIVE = "_hista_packed"


def available(model: torch.nn.Module) -> bool:
    """Whether ``model``'s linear layers can run on packed weights here: its first
    parameter on the CPU, gradients off, and this PyTorch built with oneDNN's linear ops."""
    ops = getattr(torch.ops, "mkldnn", None)
    weight = next(model.parameters(), None)
    return (weight is not None and weight.device.type == "cpu" and not torch.is_grad_enabled()
            and torch.backends.mkldnn.is_available() and ops is not None
            and hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight"))


# Sibling projections that read one input are multiplied as one, as vLLM's packed_modules_mapping does.
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))

_CACHE: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


def _eligible(module) -> bool:
    weight = getattr(module, "weight", None)
    return (isinstance(module, torch.nn.Linear) and type(weight) is torch.nn.Parameter
            and weight.dtype == torch.float32 and weight.dim() == 2 and weight.device.type == "cpu")


def _groups(model: torch.nn.Module) -> list[list[torch.nn.Linear]]:
    """The eligible linear layers of ``model``, siblings of :data:`SIBLINGS` (same parent, same
    input width, all with or all without bias) together, every other layer alone."""
    groups, grouped = [], set()
    for parent in model.modules():
        for names in SIBLINGS:
            members = [getattr(parent, name, None) for name in names]
            if (all(_eligible(m) for m in members) and len({m.in_features for m in members}) == 1
                    and len({m.bias is None for m in members}) == 1):
                groups.append(members)
                grouped.update(id(m) for m in members)
    return groups + [[m] for m in model.modules() if _eligible(m) and id(m) not in grouped]


def _packed(group: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The group's weights stacked and reordered for oneDNN, and their biases, reused while every
    weight's storage and version counter (bumped by every in-place change, an optimizer step or
    ``load_state_dict``) are unchanged."""
    key = tuple((m.weight.data_ptr(), m.weight._version, tuple(m.weight.shape)) for m in group)
    cached = _CACHE.get(group[0])
    if cached is None or cached[0] != key:
        weight = torch.cat([m.weight.detach() for m in group])
        bias = None if group[0].bias is None else torch.cat([m.bias.detach() for m in group])
        cached = (key, torch.ops.mkldnn._reorder_linear_weight(weight, 16), bias)
        _CACHE[group[0]] = cached
    return cached[1], cached[2]


def forget(model: torch.nn.Module) -> None:
    """Drop the packed copies of ``model``'s linear layers, so that the next block
    packs the weights as they are now. A copy is remade when a weight's storage or version
    counter changes, but fused optimizers (``torch.optim.AdamW(fused=True)``, transformers'
    default ``adamw_torch_fused``) update weights in place without bumping the counter: code that
    samples from a policy between optimiser steps calls this first."""
    for module in model.modules():
        _CACHE.pop(module, None)


def product(group: list[torch.nn.Linear]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> [m(x) for m in group]`` side by side in one float32 product on the group's packed
    weights: what :func:`packed_linears` computes for the group, without the modules.
    For CPU float32 inputs without gradients (see :func:`available`)."""
    weight, bias = _packed(group)
    return lambda x: torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _Product:
    """One oneDNN product for a group of linear layers. Each member's forward returns its slice
    of the product of its input; the product is made when a member is called with an input
    other than the last one, or one it has already read, and dropped once every member read it."""

    def __init__(self, group: list[torch.nn.Linear]):
        self.packed, self.bias = _packed(group)
        self.bounds = [0]
        for member in group:
            self.bounds.append(self.bounds[-1] + member.out_features)
        self.input, self.output, self.unread = None, None, set()

    def forward_of(self, k: int, module: torch.nn.Linear):
        weight = module.weight.detach()
        bias = None if module.bias is None else module.bias.detach()
        whole = len(self.bounds) == 2

        def forward(x: torch.Tensor) -> torch.Tensor:
            if x.dtype != torch.float32 or torch.is_grad_enabled():
                return torch.nn.functional.linear(x, weight, bias)
            if whole:
                return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
            if x is not self.input or k not in self.unread:
                product = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
                self.input, self.output, self.unread = x, product, set(range(len(self.bounds) - 1))
            out = self.output[..., self.bounds[k] : self.bounds[k + 1]]
            self.unread.discard(k)
            if not self.unread:
                self.input = self.output = None
            return out

        return forward


@contextlib.contextmanager
def packed_linears(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, every float32 ``nn.Linear`` of a CPU ``model`` multiplies with a copy
    of its weight packed for oneDNN when called without gradients, sibling projections of
    :data:`SIBLINGS` as one product; outside it, and on other devices or
    dtypes, nothing changes. A packed copy (about 0.15 s and 0.5 GB per 135M parameters) is
    kept for later blocks while its module lives and is made anew once a weight's storage or
    version counter changes; after a fused optimiser's step call :func:`forget`. Re-entrant: a
    nested block changes nothing."""
    if getattr(model, _ACTIVE, False) or not available(model):
        yield
        return
    patched = []
    try:
        for group in _groups(model):
            product = _Product(group)
            for k, module in enumerate(group):
                patched.append((module, module.__dict__.get("forward")))
                module.forward = product.forward_of(k, module)
        setattr(model, _ACTIVE, True)
        yield
    finally:
        for module, previous in patched:
            if previous is None:
                del module.forward
            else:
                module.forward = previous
        model.__dict__.pop(_ACTIVE, None)
