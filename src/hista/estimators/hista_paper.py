"""Hista's paper profile, ``get("hista", profile="paper")`` (SPEC §4.3): the structure the
paper published (the last layer, interval 50, stride 5, made for 4,096-token responses of
1.5B-14B models) with the default profile's definitions, i.e. the default profile as it was
before the structure rule (docs/estimators.md "Structure rule") and before issue 63's fix: its
values read the scored rollout's own reward (``include_self``; docs/estimators.md "Valid
baselines": leaks, kept for reproduction)."""

from __future__ import annotations

from . import register
from .hista import Hista, HistaPaperConfig


@register("hista", profile="paper")
class HistaPaper(Hista):
    """Hista (SPEC §4.3, default definitions) with the paper's layer −1, interval 50 and
    stride 5 instead of the structure rule (any of them set to None follows the rule), and the
    paper's ``include_self=True``."""

    config_class = HistaPaperConfig
