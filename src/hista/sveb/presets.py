"""SVEB settings: what a case build takes (:class:`BuildConfig`), its named presets,
the methods a run evaluates by default and the folds of a cross-fitted PPO-1 critic. Plain
values, no model and no torch: the CLI and :func:`hista.sveb.run` read them from here only."""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ..errors import InputError
from ..rollout.config import SamplingConfig, check_engine

#: folds by problem of a cross-fitted PPO-1 critic when none are given (SPEC §4.5; fewer problems: one each)
DEFAULT_FOLDS = 5


@dataclasses.dataclass
class BuildConfig:
    """Settings of a case build. The defaults are the ``default`` preset (the paper's
    settings: G = 32 rollouts, M = 20 continuations, one state per problem, difficulty range
    0.1-0.8 on the initial rollouts' accuracy); :mod:`hista.sveb.presets` holds the others.
    ``problems`` counts per task source. ``engine`` samples (``hf`` or ``vllm``);
    ``tensor_parallel_size`` is the vllm engine's. ``same_rollout``: the states of a problem lie
    on one rollout (segments between them: docs/sveb.md "Segments")."""

    model: str = "smollm2-135m-instruct"
    tasks: Sequence[str] = ("builtin:arith", "builtin:choice")
    problems: int = 100
    rollouts: int = 32
    continuations: int = 20
    states_per_problem: int = 1
    seed: int = 0
    split: str = "test"
    lo: Optional[float] = 0.1
    hi: Optional[float] = 0.8
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 256
    batch_size: int = 64
    engine: str = "hf"
    tensor_parallel_size: int = 1
    same_rollout: bool = False

    def __post_init__(self) -> None:
        """Check every field, so that no setting silently builds nothing: an
        InputError names the field."""
        if isinstance(self.tasks, str) or not self.tasks or not all(isinstance(t, str) and t for t in self.tasks):
            raise InputError(f"must be a non-empty list of task specs, got {self.tasks!r}", field="tasks")
        if not isinstance(self.model, str) or not self.model:
            raise InputError(f"must be a model name, got {self.model!r}", field="model")
        least = {"problems": 1, "rollouts": 2, "continuations": 1, "states_per_problem": 1, "seed": 0,
                 "max_new_tokens": 2}
        for name, low in least.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                why = " (a state needs a completion of 2 tokens)" if name == "max_new_tokens" else ""
                raise InputError(f"must be an integer >= {low}{why}, got {value!r}", field=name)
        for name in ("lo", "hi"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0.0 <= value <= 1.0):
                raise InputError(f"must be an accuracy in [0, 1] or None, got {value!r}", field=name)
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise InputError(f"lo {self.lo} is above hi {self.hi}: no problem could be kept", field="lo")
        if not isinstance(self.same_rollout, bool):
            raise InputError(f"must be true or false, got {self.same_rollout!r}", field="same_rollout")
        self.sampling()  # temperature, top_p, batch_size
        check_engine(self.engine, self.tensor_parallel_size)

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_p=self.top_p,
                              max_new_tokens=self.max_new_tokens, batch_size=self.batch_size)

    def settings(self, revision: str, engine: dict) -> dict:
        """What a case file records and a resumed build must match (``problems`` may grow):
        the fields, the model's revision and the sampling engine's identity (name and versions),
        so that no file mixes the samples of two engines."""
        out = dataclasses.asdict(self)
        out.pop("problems")
        out.pop("tensor_parallel_size")
        if not self.same_rollout:  # files built before the option match their settings as they were
            out.pop("same_rollout")
        out["tasks"] = list(self.tasks)
        out["revision"] = revision
        out["engine"] = engine
        return out



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
    """The build settings of preset ``name``; a ValueError lists the presets."""
    if name not in PRESETS:
        raise ValueError(f"unknown SVEB preset {name!r}; valid: {', '.join(sorted(PRESETS))}")
    return PRESETS[name]


@dataclasses.dataclass
class GradConfig:
    """Settings of a measurement (docs/sveb.md "Update direction"). ``groups`` R and
    ``group_size`` G: R·G rollouts per prompt; each group is a training step's group once and
    the others its reference ((R − 1)·G rollouts; the defaults give 64). ``loss`` and
    ``loss_config``, ``temperature``, ``max_new_tokens``, ``mask_truncated`` and
    ``max_grad_norm`` are the training recipe's. ``params``: ``head`` (the output layer, in
    closed form) or ``all`` (autograd). ``adam``: also the cosine of Adam's first update (it
    needs each step materialised, the most expensive part in ``head``)."""

    model: str = "smollm2-135m-instruct"
    tasks: Sequence[str] = ("builtin:arith?steps=1&ops=+&max_value=40",)  # the embedded model solves some
    problems: int = 32
    seed: int = 0
    split: str = "test"
    groups: int = 9
    group_size: int = 8
    temperature: float = 0.7
    max_new_tokens: int = 96
    batch_size: int = 128  # sequences per engine call: 14% faster than 64 on 2 cores (bench: docs/sveb.md)
    loss: str = "dapo"
    loss_config: dict = dataclasses.field(default_factory=dict)
    mask_truncated: bool = True
    max_grad_norm: float = 1.0
    params: str = "head"
    adam: bool = True

    def __post_init__(self) -> None:
        for name, low in (("problems", 1), ("groups", 3), ("group_size", 2), ("max_new_tokens", 1),
                          ("batch_size", 1), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError(f"must be an integer >= {low}, got {value!r}", field=name)
        if self.params not in ("head", "all"):
            raise InputError(f"must be head or all, got {self.params!r}", field="params")
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise InputError(f"must be > 0 (the gradient is of the sampling policy), got {self.temperature!r}",
                             field="temperature")
        if not (isinstance(self.max_grad_norm, (int, float)) and self.max_grad_norm > 0):
            raise InputError(f"must be > 0, got {self.max_grad_norm!r}", field="max_grad_norm")

    def settings(self) -> dict:
        """The settings as JSON values (what OUT/settings.json records)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
