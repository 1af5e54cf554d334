"""Capture hidden states and entropies from a model's own log-prob pass (SPEC §9).

TRL computes the old-policy log-probs with ``model(..., labels=..., fused_lm_head=True)`` under
``torch.no_grad()``. Hista needs one layer's hidden states of exactly that pass and S-trace the
old policy's entropies; hooks collect both, so no extra model call is made.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch


@dataclass
class PassRecord:
    """What the hooks saw during the log-prob passes inside the ``with`` block: per forward
    call, the backbone's last hidden state [b, L, H] and the per-token entropy (or None)."""

    hidden: list[torch.Tensor] = field(default_factory=list)
    entropy: list[Optional[torch.Tensor]] = field(default_factory=list)

    def rows(self, n: int) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The first ``n`` rows of hidden states and entropies (a later pass through the same
        model, such as a PEFT reference pass, is ignored); (None, None) when nothing ran."""
        if not self.hidden:
            return None, None
        hidden = torch.cat(self.hidden, dim=0)[:n]
        entropy = None
        if all(e is not None for e in self.entropy):
            entropy = torch.cat(self.entropy, dim=0)[:n]
        return hidden, entropy


def _backbone(model: torch.nn.Module) -> torch.nn.Module:
    inner = getattr(model, "module", model)  # DDP / DeepSpeed wrappers
    base = getattr(inner, "base_model", None)
    if base is None or base is inner:
        base = getattr(inner, "model", None)
    if base is None:
        raise ValueError(f"cannot find the decoder of {type(inner).__name__} to capture hidden states from")
    return base


@contextmanager
def capture_logprob_pass(model: torch.nn.Module) -> Iterator[PassRecord]:
    """Record the final hidden states (after the last norm, as ``hidden_states[-1]``) and
    entropies of every no-grad ``fused_lm_head=True`` call of ``model`` (TRL's log-prob pass)
    made inside the block; generation calls and gradient passes are not recorded (SPEC §9)."""
    record = PassRecord()
    inner = getattr(model, "module", model)
    state = {"on": False, "hidden": None}

    def before(module, args, kwargs):
        state["on"] = bool(kwargs.get("fused_lm_head")) and not torch.is_grad_enabled()

    def backbone_done(module, args, output):
        if state["on"]:
            state["hidden"] = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]

    def after(module, args, kwargs, output):
        if state["on"] and state["hidden"] is not None:
            record.hidden.append(state["hidden"].detach())
            entropy = getattr(output, "entropy", None)
            record.entropy.append(None if entropy is None else entropy.detach())
        state["on"], state["hidden"] = False, None

    handles = [
        inner.register_forward_pre_hook(before, with_kwargs=True),
        _backbone(model).register_forward_hook(backbone_done),
        inner.register_forward_hook(after, with_kwargs=True),
    ]
    try:
        yield record
    finally:
        for h in handles:
            h.remove()
