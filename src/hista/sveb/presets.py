"""SVEB presets (SPEC §8): named build settings, and the methods a run evaluates by default.
The CLI and :func:`hista.sveb.run` read them from here only."""

from __future__ import annotations

from .build import BuildConfig

PRESETS: dict[str, BuildConfig] = {
    # the paper's settings (G 32, M 20, accuracy filter 0.1-0.8): the BuildConfig defaults
    "default": BuildConfig(),
    # about 8 minutes on 2 CPU cores with the embedded model: the README's main job
    "quick": BuildConfig(tasks=("builtin:arith?steps=1", "builtin:choice"), problems=12, rollouts=16,
                         continuations=12, max_new_tokens=96),
    # long responses (about 170 tokens on median, so the paper's Hista interval of 50 leaves about
    # three interior nodes): arithmetic with a worked explanation. Multiple choice with
    # explain=yes is left out: its responses are shorter (about 120 tokens on median) and its
    # accuracy mostly below 0.1. Two states per problem halve the rollouts per case.
    "long": BuildConfig(tasks=("builtin:arith?steps=1&explain=yes",), problems=24, rollouts=16,
                        continuations=16, states_per_problem=2, max_new_tokens=256),
}

#: estimator methods (``name[-profile][?key=value&...]``) evaluated when none are named
DEFAULT_METHODS = ("grpo", "numca", "numca-reference", "hista", "hista-paper", "hista-reference", "probe")


def preset(name: str) -> BuildConfig:
    """The build settings of preset ``name`` (SPEC §8); a ValueError lists the presets."""
    if name not in PRESETS:
        raise ValueError(f"unknown SVEB preset {name!r}; valid: {', '.join(sorted(PRESETS))}")
    return PRESETS[name]
