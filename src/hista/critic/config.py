"""How a PPO critic is fitted (SPEC §4.5): :class:`FitConfig` and the CPU default of trained
layers. Plain values, no torch: the command line reads its defaults from here."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from ..errors import InputError

#: decoder layers trained on the CPU when none are named (the head always trains)
CPU_LAYERS = 2


@dataclasses.dataclass
class FitConfig:
    """How a critic is fitted (SPEC §4.5): ``lam`` the GAE λ of the targets (γ = 1),
    ``epochs`` passes over the rollouts, ``lr`` AdamW's learning rate, ``batch_size``
    rollouts per optimiser step, ``value_clip`` PPO's value clipping range ε (None: off; the
    loss is then max((V − G)², (V_old + clip(V − V_old, ±ε) − G)²), V_old the values when the
    epoch's targets were computed), ``max_grad_norm`` gradient clipping, ``seed`` the
    shuffling seed."""

    lam: float = 1.0
    epochs: int = 4
    lr: float = 1e-4
    batch_size: int = 8
    value_clip: Optional[float] = None
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.lam <= 1.0:
            raise InputError(f"lam must lie in [0, 1], got {self.lam}", field="lam")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}", field=name)
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise InputError(f"lr must be a positive number, got {self.lr}", field="lr")
        if self.value_clip is not None and not self.value_clip > 0:
            raise InputError(f"value_clip must be positive, got {self.value_clip}", field="value_clip")
